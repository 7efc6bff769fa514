# features stage rules: see the stage owner.
