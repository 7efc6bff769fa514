# levels stage rules: see the stage owner.
