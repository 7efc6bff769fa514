# results stage rules: see the stage owner.
