"""The request edge: the whole request priced once, tool pairs whole, true stats, typed refusals.

The stateful machine of :mod:`tests.request_machine` runs here derandomised with a
fixed example count, so a bug it can find fails every run; ``make soak`` runs it long.
"""

from __future__ import annotations

from hypothesis import settings
from request_machine import RequestMachine

RequestMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, derandomize=True, database=None, deadline=None
)
TestRequestMachine = RequestMachine.TestCase
