"""Measured claims: statistics, growth-class fits and the paper's tables, each with a figure (issue 5).

``MEASUREMENTS`` maps a measurement's name to its function and claim id;
``CONTROLS`` maps a negative control's name to the measurement and options
under which the same decision rule must fail; :func:`run` runs either at the
sizes of a profile ("dev", "ci", "thorough") and writes the SVG figures into
``out_dir``::

    from attnclaims.measurements import run
    result = run("scaling-variance", profile="ci", out_dir="figures")
    result.passed, result.decision, result.figures

Modules: :mod:`.scaling` (scaling-variance, softmax-saturation), :mod:`.recurrence` (seq2seq-bottleneck,
rnn-gradients, rnn-sequential), :mod:`.paths` (Vaswani Tables 1 and 3), :mod:`.graphs` (computation graphs and
critical paths, also used by parallel-training), :mod:`.stats` (intervals and growth classes).
"""
from attnclaims.measurements._core import CONTROLS, MEASUREMENTS, PROFILES, Control, Measurement, MeasurementResult, run
from attnclaims.measurements import constructions, depth, lipschitz, paths, recurrence, scaling  # noqa: F401  (registers)

__all__ = ["MEASUREMENTS", "CONTROLS", "PROFILES", "Measurement", "Control", "MeasurementResult", "run"]
