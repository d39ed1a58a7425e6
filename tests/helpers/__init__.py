"""Test helpers: fakes for the outside world and builders of test models live here, in one place."""
