"""Helpers shared by the tests: fixtures, small agents, the request machine, fakes."""
