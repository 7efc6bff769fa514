# probes stage rules: see the stage owner.
