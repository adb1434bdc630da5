"""The family study: every preset of the family, side by side, and where
each wins on modeled networks."""
