"""The process side of a run, apart from what runs inside pytest (the plugin, :mod:`attnclaims.plugin`,
and the evidence it records, :mod:`attnclaims.evidence`), as pytest-xdist keeps its worker apart
from its controller:

* :mod:`attnclaims.run.process` — the one module that starts pytest processes: a child per session
  or a fork of the fork server, its deadlines and event stream, collection; one rootdir, one
  environment and one set of constants for ``check``, ``report``, ``explain``, ``mutants`` and the
  benchmarks;
* :mod:`attnclaims.run.probe` — resolving ``package.module:attr`` implementations in a short-lived
  child before anything runs.

What a run of the claim suite does with the sessions (one per implementation, the cache, the
evidence of partial runs) is :mod:`attnclaims.orchestrator`; the kill matrix is :mod:`attnclaims.mutants`.
"""
