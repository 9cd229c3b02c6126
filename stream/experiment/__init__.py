"""Closed-loop experiments a lab declares: rules on tracked poses, their timing, the
devices they drive and the log of what fired when (docs/closed-loop.md).

- `experiment`: the records (`Experiment`, `Rule`, the conditions, regions, devices),
  read from YAML (`load_experiment`) and checked against a model (`check_experiment`);
- `rules`: the conditions evaluated on each frame's poses, vectorised;
- `timing`: hold times, refractory periods, trigger limits and trials;
- `predict`: forward prediction of each tracked node (constant-velocity Kalman);
- `devices`: the outputs (serial, OSC, GPIO, NI-DAQ, ZeroMQ, callbacks), each in a
  thread of its own;
- `events`: the event log (CSV journal, sleap-io events in a .slp, a table in an .nwb);
- `closed_loop`: `ClosedLoop`, the experiment run on a pipeline's ring;
- `overlay`: the regions and rule states drawn on frames.
"""

from sleap_live.stream.experiment.experiment import (
    All,
    Angle,
    AnyOf,
    CallbackDevice,
    Distance,
    Ellipse,
    Experiment,
    ExperimentError,
    GpioDevice,
    InRegion,
    NidaqDevice,
    NodeOf,
    Not,
    OscDevice,
    Output,
    Polygon,
    Posture,
    Rectangle,
    Rule,
    SerialDevice,
    Speed,
    Trials,
    ZmqDevice,
    check_experiment,
    experiment_from_dict,
    load_experiment,
)
from sleap_live.stream.experiment.rules import FALSE, TRUE, UNKNOWN, CompiledRules
from sleap_live.stream.experiment.timing import Timeline, Transition

__all__ = [
    "FALSE",
    "TRUE",
    "UNKNOWN",
    "All",
    "Angle",
    "AnyOf",
    "CallbackDevice",
    "CompiledRules",
    "Distance",
    "Ellipse",
    "Experiment",
    "ExperimentError",
    "GpioDevice",
    "InRegion",
    "NidaqDevice",
    "NodeOf",
    "Not",
    "OscDevice",
    "Output",
    "Polygon",
    "Posture",
    "Rectangle",
    "Rule",
    "SerialDevice",
    "Speed",
    "Timeline",
    "Transition",
    "Trials",
    "ZmqDevice",
    "check_experiment",
    "experiment_from_dict",
    "load_experiment",
]
