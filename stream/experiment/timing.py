"""When a rule goes on and off: its condition's values over time, through its hold time,
refractory period, trigger limit and the experiment's trials.

A rule is *on* from its onset to its offset. Frame by frame (`Timeline.step`):

- its condition counts as true on a frame when it is TRUE, or when it is UNKNOWN
  and the rule's `missing` is ``"keep"`` and it counted as true on the frame before
  (``"off"``, the default, counts UNKNOWN as false);
- an *onset* comes on the first frame on which the condition has counted as true
  for at least `hold` seconds without a break (measured from the first such frame's
  time), inside a trial, at least `refractory` seconds after the rule's last
  offset, and while the rule has had fewer than `max_triggers` onsets in this trial
  (in the run, without trials);
- an *offset* comes on the first frame on which the condition no longer counts as
  true, or which is past the end of the trial the onset was in; `finish` turns off
  every rule still on at the end of the run.

Times are the experiment's seconds (video time or capture time, see `Experiment.time`).
"""

from __future__ import annotations

import math
from typing import Literal

import attrs

from sleap_live.stream.experiment.experiment import Experiment, Rule, Trials
from sleap_live.stream.experiment.rules import TRUE, UNKNOWN

Kind = Literal["onset", "offset"]
# Seconds by which a time may fall short of a hold or refractory period and still
# count: frame times (index / fps) carry rounding, and 0.5 - 0.3 is not 0.2.
_SLACK = 1e-6


@attrs.frozen
class Transition:
    """A rule going on or off.

    Attributes:
        rule: the rule's position in `Experiment.rules`.
        kind: ``"onset"`` or ``"offset"``.
        frame_index: the frame it was decided on.
        time: that frame's experiment time (seconds).
        trial: the trial it is in (from 0); None without trials.
        at_end: an offset because the run ended (`Timeline.finish`): the rule was on
            up to and including its frame.
    """

    rule: int
    kind: Kind
    frame_index: int
    time: float
    trial: int | None
    at_end: bool = False


def trial_at(trials: Trials | None, time: float) -> int | None:
    """The trial `time` is in; -1 outside every trial; None without trials."""
    if trials is None:
        return None
    since = time - trials.start
    if since < 0:
        return -1
    period = trials.duration + trials.interval
    index = 0 if math.isinf(period) else int(since // period)
    if trials.count is not None and index >= trials.count:
        return -1
    return index if since - index * period < trials.duration else -1


@attrs.define
class _RuleState:
    on: bool = False
    counted_true: bool = False
    true_since: float | None = None
    quiet_until: float = -math.inf
    on_trial: int | None = None
    onsets: dict[int | None, int] = attrs.field(factory=dict)


class Timeline:
    """Every rule's state through a run; `step` once per frame, in order."""

    def __init__(self, experiment: Experiment) -> None:
        self._rules: tuple[Rule, ...] = experiment.rules
        self._trials = experiment.trials
        self._states = [_RuleState() for _ in self._rules]
        self._last: tuple[int, float] | None = None

    @property
    def on(self) -> list[bool]:
        """Whether each rule is on now."""
        return [state.on for state in self._states]

    def step(self, values: list[int], frame_index: int, time: float) -> list[Transition]:
        """The transitions of one frame, given each rule's condition value on it."""
        self._last = (frame_index, time)
        trial = trial_at(self._trials, time)
        in_trial = trial is None or trial >= 0
        out: list[Transition] = []
        for number, (rule, state, value) in enumerate(
            zip(self._rules, self._states, values, strict=True)
        ):
            counted = value == TRUE or (
                value == UNKNOWN and rule.missing == "keep" and state.counted_true
            )
            state.counted_true = counted
            if not counted:
                state.true_since = None
                if not state.on:
                    # Off and staying off (most rules on most frames).
                    continue
            elif state.true_since is None:
                state.true_since = time
            if state.on:
                if not counted or trial != state.on_trial:
                    out.append(self._off(number, state, frame_index, time))
                else:
                    continue
            if (
                counted
                and in_trial
                and state.true_since is not None
                and time - state.true_since >= rule.hold - _SLACK
                and time >= state.quiet_until - _SLACK
                and (rule.max_triggers is None or state.onsets.get(trial, 0) < rule.max_triggers)
            ):
                state.on = True
                state.on_trial = trial
                state.onsets[trial] = state.onsets.get(trial, 0) + 1
                out.append(Transition(number, "onset", frame_index, time, trial))
        return out

    def finish(self) -> list[Transition]:
        """Offsets for the rules still on, on the last frame stepped."""
        if self._last is None:
            return []
        frame_index, time = self._last
        return [
            attrs.evolve(self._off(number, state, frame_index, time), at_end=True)
            for number, state in enumerate(self._states)
            if state.on
        ]

    def _off(self, number: int, state: _RuleState, frame_index: int, time: float) -> Transition:
        state.on = False
        state.quiet_until = time + self._rules[number].refractory
        return Transition(number, "offset", frame_index, time, state.on_trial)
