# splits stage rules: see the stage owner.
