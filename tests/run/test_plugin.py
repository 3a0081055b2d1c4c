"""The pytest plugin seen from a project that uses it: ``pytest --attn-impl X`` in a fresh process.

Each test writes a tiny test module (and, where needed, an implementation module) into a
temporary folder and runs pytest on it in a subprocess, the way a user's CI does: the plugin
comes from the ``pytest11`` entry point of the installed package, not from this checkout's
conftest. Checked: a bad ``--attn-impl`` gives a one-line error and no traceback; a
``module:attr`` factory is resolved and called; a missing capability is recorded as
"not applicable" with the capability's name.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# A user's test module: one test per capability it needs, tagged with real claim ids.
_USER_TESTS = '''
import numpy as np
import pytest

@pytest.mark.claim("softmax-distribution")
@pytest.mark.requires("softmax")
def test_softmax_rows_sum_to_one(impl):
    out = impl.softmax(np.array([[1.0, 2.0, 3.0]]))
    assert abs(out.sum() - 1.0) < 1e-12

@pytest.mark.claim("convex-combination")
@pytest.mark.requires("attention")
def test_attention_runs(impl):
    q = np.ones((2, 3))
    impl.attention(q, q, q)

@pytest.mark.claim("self-attention")
@pytest.mark.requires("attention")
def test_identical_values_are_returned(impl):
    v = np.ones((4, 2))
    assert np.array_equal(impl.attention(np.ones((3, 2)), v, v), np.ones((3, 2))), "rows differ"
'''

# A user's implementation module: ``make`` is a factory (a function) returning a protocol object
# with only the softmax capability.
_USER_IMPL = '''
import numpy as np

class SoftmaxOnly:
    name = "softmax-only"
    dtype = np.float64

    def softmax(self, x, axis=-1):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

def make():
    return SoftmaxOnly()

class WrongAttention(SoftmaxOnly):
    name = "wrong-attention"
    responsible = {"attention": "mylib.fused_attention"}

    def attention(self, q, k, v, mask=None, scale=None):
        return np.zeros(q.shape[:-1] + v.shape[-1:])

class RaisesNotImplemented(SoftmaxOnly):
    name = "no-masks"

    def attention(self, q, k, v, mask=None, scale=None):
        raise NotImplementedError("masks are not supported")

not_an_implementation = 42
'''


def _run(folder: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(folder), PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir", str(folder),
           "-c", os.devnull, *args]
    return subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "test_user.py").write_text(textwrap.dedent(_USER_TESTS), encoding="utf-8")
    (tmp_path / "user_impl.py").write_text(textwrap.dedent(_USER_IMPL), encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("spec, says", [
    ("bad", "unknown implementation 'bad'"),
    ("no_such_module_xyz:impl", "cannot import 'no_such_module_xyz'"),
    ("user_impl:missing", "has no attribute 'missing'"),
    ("user_impl:not_an_implementation", "none of the protocol's methods"),
])
def test_bad_attn_impl_gives_one_line_error(project, spec, says):
    result = _run(project, "test_user.py", "--attn-impl", spec)
    assert result.returncode == 4, result.stdout + result.stderr  # pytest's usage-error status
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, result.stderr
    assert says in errors[0]
    assert "Traceback" not in result.stdout + result.stderr


def test_collect_only_is_a_clean_exit(project):
    """``--collect-only`` runs no test by request: exit 0 (it once exited 2, read as "not every test ran";
    a session that stops short is tests/run/test_hostile_inputs.py's and test_plugin_misbehaving.py's)."""
    listed = _run(project, "test_user.py", "--collect-only", "--attn-impl", "reference")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "3 tests collected" in listed.stdout, listed.stdout


def test_module_attr_factory_and_not_applicable_are_recorded(project):
    out = project / "results.json"
    result = _run(project, "test_user.py", "--attn-impl", "user_impl:make", "--attn-results", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    payload = json.loads(out.read_text(encoding="utf-8"))
    assert payload["implementation"]["name"] == "softmax-only"
    import attnclaims

    assert payload["suite_version"] == attnclaims.__version__  # what report --merge checks
    from attnclaims.cache import registry_digest

    assert payload["registry_sha256"] == registry_digest()  # merge refuses results of another registry
    assert payload["implementation"]["capabilities"] == ["softmax"]
    by_claim = {e["claim"]: e for e in payload["evidence"]}
    assert by_claim["softmax-distribution"]["outcome"] == "passed"
    assert by_claim["softmax-distribution"]["implementation"] == "softmax-only"
    assert by_claim["convex-combination"]["outcome"] == "not-applicable"
    assert by_claim["convex-combination"]["message"] == "not applicable: softmax-only has no attention"


def test_not_implemented_in_a_call_is_not_applicable_and_skipped(project):
    """A method raising NotImplementedError is not applicable with its message: the evidence says so
    and pytest reports the test as skipped, so the user's run stays green (a failure is a bug here)."""
    out = project / "results.json"
    result = _run(project, "test_user.py", "-rs", "--attn-impl", "user_impl:RaisesNotImplemented",
                  "--attn-results", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 skipped" in result.stdout and "failed" not in result.stdout, result.stdout
    by_test = {e["name"]: e for e in json.loads(out.read_text(encoding="utf-8"))["evidence"]}
    attention = [e for name, e in by_test.items() if "attention" in name or "identical" in name]
    assert len(attention) == 2
    for e in attention:
        assert e["outcome"] == "not-applicable"
        assert "masks are not supported" in e["message"]


def test_plugin_is_registered_as_an_entry_point():
    from importlib.metadata import entry_points

    names = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert names.get("attnclaims") == "attnclaims.plugin"


DOCS = Path(__file__).resolve().parents[2] / "docs" / "adapters.md"


@pytest.mark.skipif(not DOCS.exists(), reason="docs/adapters.md is only in a checkout, not in the installed package")
def test_the_documented_adapter_passes_claim_tests(tmp_path):
    """The five-minute example of docs/adapters.md, copied verbatim, runs and passes."""
    import re

    code = re.findall(r"```python\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)[0]
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "mypkg" / "attnclaims_adapter.py").write_text(code, encoding="utf-8")
    out = tmp_path / "results.json"
    result = _run(tmp_path, "--pyargs", "attnclaims.suite.test_s31_attention", "-k",
                  "(test_softmax_is_a_distribution or test_output_is_in_the_convex_hull) and not rejects_broken",
                  "--attn-impl", "mypkg.attnclaims_adapter:impl", "--attn-results", str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    outcomes = {e["name"].rsplit("::", 1)[-1]: e["outcome"] for e in json.loads(out.read_text())["evidence"]}
    assert outcomes == {"test_softmax_is_a_distribution": "passed",
                        "test_output_is_in_the_convex_hull_of_allowed_values": "passed"}


def test_failure_names_the_responsible_library_function(project):
    """An implementation that maps capabilities to library functions (``responsible``, as the built-in
    adapters do) gets that function named in the message of a failed check."""
    out = project / "results.json"
    result = _run(project, "test_user.py", "--attn-impl", "user_impl:WrongAttention", "--attn-results", str(out))
    assert result.returncode == 1, result.stdout + result.stderr
    by_claim = {e["claim"]: e for e in json.loads(out.read_text(encoding="utf-8"))["evidence"]}
    failed = by_claim["self-attention"]
    assert failed["outcome"] == "failed" and failed["capability"] == "attention"
    assert failed["message"].endswith("[responsible: mylib.fused_attention]"), failed["message"]
    assert by_claim["convex-combination"]["outcome"] == "passed"


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_event_stream_of_a_run(project):
    """One event per step, in order: the implementation, the collected tests with their claim tags,
    each test's start and its end with its evidence, the end of the session with the counts."""
    path = project / "events.jsonl"
    result = _run(project, "test_user.py", "--attn-impl", "user_impl:make", "--attn-events", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    events = _events(path)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "implementation" and kinds[1] == "collected" and kinds[-1] == "session-finished", kinds
    assert kinds[2:-1] == ["test-started", "test-finished"] * 3, kinds
    assert events[0]["name"] == "softmax-only" and events[0]["capabilities"] == ["softmax"]
    collected = events[1]
    assert collected["n"] == 3
    tags = {t["test"].rsplit("::", 1)[-1]: t["tags"] for t in collected["tests"]}
    assert tags["test_softmax_rows_sum_to_one"] == {"softmax-distribution": ["property", "support"]}
    for started, finished in zip(events[2:-1:2], events[3:-1:2]):
        assert started["test"] == finished["test"] and started["t"] <= finished["t"]
        (evidence,) = finished["evidence"]
        assert evidence["name"] == finished["test"] and evidence["outcome"] == finished["outcome"]
    assert events[-1]["tests_run"] == events[-1]["tests_total"] == 3 and events[-1]["exitstatus"] == 0
    assert events[-1]["stopped"] == ""


def test_a_process_that_dies_mid_run_leaves_evidence_and_no_session_end(project):
    """``os._exit(0)`` inside the implementation: the events stop after the finished tests' evidence (no
    ``session-finished``), the results file says incomplete, and pytest's exit status is 2, not the 0
    the implementation asked for (a CI step must not pass on a run that stopped early)."""
    (project / "exits_impl.py").write_text(textwrap.dedent('''
        import os
        from user_impl import SoftmaxOnly

        class Exits(SoftmaxOnly):
            def attention(self, q, k, v, mask=None, scale=None):
                os._exit(0)
    '''), encoding="utf-8")
    events, results = project / "events.jsonl", project / "results.json"
    result = _run(project, "test_user.py", "--attn-impl", "exits_impl:Exits", "--attn-events", str(events),
                  "--attn-results", str(results))
    assert result.returncode == 2  # os._exit(0) before the session finished: "interrupted", never 0
    kinds = [e["event"] for e in _events(events)]
    assert "session-finished" not in kinds and kinds.count("test-finished") == 1, kinds
    payload = json.loads(results.read_text(encoding="utf-8"))
    assert payload["complete"] is False and payload["tests_total"] == 3 and payload["tests_run"] <= 1


_TWO_SESSIONS = '''
import json, sys
import pytest

for k, out in (("softmax", "a.json"), ("identical", "b.json")):
    pytest.main(["-q", "-p", "no:cacheprovider", "-c", "/dev/null", "--rootdir", ".", "test_user.py", "-k", k,
                 "--attn-impl", "user_impl:WrongAttention", "--attn-results", out])
for out in ("a.json", "b.json"):
    print(out, sorted(e["name"].rsplit("::", 1)[-1] for e in json.load(open(out))["evidence"]))
'''


def test_two_sessions_in_one_process_keep_their_own_evidence(project):
    """The plugin's state lives on each session's config, not in module globals: a second
    ``pytest.main`` in the same process records only its own tests."""
    env = dict(os.environ, PYTHONPATH=str(project))
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run([sys.executable, "-c", _TWO_SESSIONS], cwd=project, env=env, capture_output=True,
                          text=True, timeout=120)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(("a.json", "b.json"))]
    assert lines == ["a.json ['test_softmax_rows_sum_to_one']", "b.json ['test_identical_values_are_returned']"], \
        proc.stdout[-2000:] + proc.stderr[-2000:]


_FOLLOWS = '''
import numpy as np
import pytest

from attnclaims.checks import strategies


@pytest.mark.claim("softmax-distribution")
def test_draws_follow_impl(impl):
    assert strategies.followed() is impl
    assert strategies.cast([1.0]).dtype == np.float32


@pytest.mark.claim("softmax-distribution")
def test_without_impl_draws_float64():
    assert strategies.followed() is None
'''


def test_follow_implementation_is_provided_by_the_plugin(project):
    """A test module that imports no fixture: during a test that takes ``impl`` the strategies follow
    it (float32 here), in a test without ``impl`` they draw float64."""
    (project / "test_follows.py").write_text(_FOLLOWS, encoding="utf-8")
    (project / "f32_impl.py").write_text(
        "import numpy as np\nfrom user_impl import SoftmaxOnly\n\n\n"
        "class F32(SoftmaxOnly):\n    dtype = np.float32\n", encoding="utf-8")
    result = _run(project, "test_follows.py", "--attn-impl", "f32_impl:F32")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "2 passed" in result.stdout


_KILL_TESTS = '''
import numpy as np
import pytest


@pytest.mark.claim("self-attention")
@pytest.mark.requires("attention")
def test_k1(impl):
    v = np.ones((4, 2))
    assert np.array_equal(impl.attention(np.ones((3, 2)), v, v), np.ones((3, 2)))


@pytest.mark.claim("self-attention")
@pytest.mark.requires("attention")
def test_k2(impl):
    assert impl.attention(np.ones((3, 2)), np.ones((4, 2)), np.ones((4, 2))).shape == (3, 2)


@pytest.mark.claim("softmax-distribution")
def test_other_claim(impl):
    impl.softmax(np.zeros((1, 2)))


@pytest.mark.claim("self-attention")
def test_not_an_implementation_test():
    pass
'''


def test_the_kill_matrix_options(project):
    """``--attn-kill`` keeps only implementation tests, ``--attn-kill-claims`` only those of the given
    claims, ``--attn-kill-first`` skips a test once its claims have a failing test (marked in its event)."""
    (project / "test_kill.py").write_text(_KILL_TESTS, encoding="utf-8")
    path = project / "events.jsonl"
    result = _run(project, "test_kill.py", "--attn-impl", "user_impl:WrongAttention", "--attn-events", str(path),
                  "--attn-kill", "--attn-kill-claims", "self-attention", "--attn-kill-first")
    assert result.returncode == 1, result.stdout + result.stderr
    events = _events(path)
    collected = next(e for e in events if e["event"] == "collected")
    assert [t["test"].rsplit("::", 1)[-1] for t in collected["tests"]] == ["test_k1", "test_k2"]
    finished = {e["test"].rsplit("::", 1)[-1]: e for e in events if e["event"] == "test-finished"}
    assert finished["test_k1"]["outcome"] == "failed" and not finished["test_k1"]["kill_skipped"]
    assert finished["test_k2"]["kill_skipped"] is True


_SHRINK_TEST = '''
import os
import pytest
from hypothesis import given
from hypothesis import strategies as st

@pytest.mark.claim("self-attention")
@pytest.mark.requires("attention")
@given(n=st.integers(0, 10**6))
def test_drawn(impl, n):
    with open(os.environ["DRAWN_LOG"], "a") as f:
        f.write(f"{n}\\n")
    assert n < 1000
'''


@pytest.mark.parametrize("no_shrink", [False, True])
def test_attn_no_shrink_keeps_the_failure_and_drops_the_minimising(project, no_shrink, monkeypatch):
    """``--attn-no-shrink`` (CI's library runs): the test fails as it would; its counterexample is the first
    failing example, run once more to report it, where the shrink phase tries many and ends at exactly 1000."""
    (project / "test_shrink.py").write_text(_SHRINK_TEST, encoding="utf-8")
    log = project / "drawn.txt"
    monkeypatch.setenv("DRAWN_LOG", str(log))
    result = _run(project, "test_shrink.py", "--attn-impl", "user_impl:WrongAttention", "--hypothesis-profile", "ci",
                  *(["--attn-no-shrink"] if no_shrink else []))
    assert result.returncode == 1, result.stdout + result.stderr
    drawn = [int(v) for v in log.read_text().split()]
    first = next(i for i, v in enumerate(drawn) if v >= 1000)
    after = drawn[first:]
    if no_shrink:
        assert len(set(after)) == 1 and len(after) <= 3, after  # the first failure, replayed
    else:
        assert after[-1] == 1000 and len(set(after)) > 3, after


_CONSTANTS_TESTS = '''
import os
import pytest
from hypothesis import given
from hypothesis import strategies as st

if os.environ.get("IMPORT_LOCAL"):
    import local_constants_mod  # noqa: F401 (a local module whose constants hypothesis may draw)


def _log(name, x, n):
    with open(os.path.join(os.environ["DRAWN_DIR"], name), "a") as f:
        f.write(f"{x!r} {n}\\n")


@pytest.mark.claim("self-attention")
@given(x=st.floats(-10, 10), n=st.integers(0, 10**6))
def test_claimed(x, n):
    _log("claimed", x, n)


@given(x=st.floats(-10, 10), n=st.integers(0, 10**6))
def test_unclaimed(x, n):
    _log("unclaimed", x, n)
'''


def test_a_claim_test_draws_the_same_examples_whatever_local_modules_were_imported(project, monkeypatch):
    """hypothesis draws constants from the source of the local modules imported so far: a derandomized claim test
    drew other examples after one more import (a subset run, a forked lane, an adapter with constants of its own).
    Inside claim tests that pool is pinned (attnclaims.profiles.pinned_constants): the claim test's draws are the
    same with and without the extra module, while an unmarked test's — the control, which shows the pool is
    there to pin — change."""
    (project / "test_constants.py").write_text(_CONSTANTS_TESTS, encoding="utf-8")
    (project / "local_constants_mod.py").write_text(
        "VALUES = (1.2345678, 2.718281828, -3.3333, 4.4444, -5.5555, 6.789, 7.25, 123457, 98765, 54321, 777777)\n",
        encoding="utf-8")
    logs = {}
    for extra in ("", "1"):
        folder = project / f"drawn{extra or 0}"
        folder.mkdir()
        monkeypatch.setenv("DRAWN_DIR", str(folder))
        monkeypatch.setenv("IMPORT_LOCAL", extra)
        result = _run(project, "test_constants.py", "--hypothesis-profile", "ci")
        assert result.returncode == 0, result.stdout + result.stderr
        logs[extra] = {name: (folder / name).read_text().split("\n") for name in ("claimed", "unclaimed")}
    assert len(logs[""]["claimed"]) > 40
    assert logs[""]["claimed"] == logs["1"]["claimed"]
    assert logs[""]["unclaimed"] != logs["1"]["unclaimed"]  # the pool changes unpinned draws


def test_pinned_constants_without_hypothesis_pool_is_a_no_op():
    """Under a hypothesis without the private pool (older, or a release that moved it) importing attnclaims.profiles
    patches nothing and pinned_constants() only counts: a run goes on as hypothesis draws, never a crash. Run in a
    fresh interpreter whose hypothesis has the pool's function removed before attnclaims is imported."""
    code = textwrap.dedent("""
        import hypothesis.internal.conjecture.providers as providers
        del providers._get_local_constants
        from attnclaims import profiles
        assert profiles._providers is None and not hasattr(providers, "_get_local_constants")
        with profiles.pinned_constants():
            assert profiles._PINNED[0] == 1
        assert profiles._PINNED[0] == 0
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr


# -- the claim marker's part=, self_comparison= and declined examples -----------------------------

_MARKER_TESTS = '''
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

@pytest.mark.claim("softmax-saturation", part="default-scale")
@pytest.mark.claim("softmax-distribution", self_comparison=True)
@pytest.mark.requires("softmax")
def test_tagged(impl):
    x = np.array([[1.0, 2.0]])
    assert np.array_equal(impl.softmax(x), impl.softmax(x))

@pytest.mark.claim("convex-combination")
@pytest.mark.requires("attention")
@settings(max_examples=20, database=None, derandomize=True)
@given(width=st.sampled_from([1, 2, 3, 4]))
def test_declines_some(impl, width):
    q = np.ones((2, width))
    out = impl.attention(q, q, q)
    assert out.shape == (2, width)
'''

_WIDTH_TWO_ONLY = '''
import numpy as np

class WidthTwoOnly:
    name = "width-two"
    dtype = np.float64

    def softmax(self, x, axis=-1):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    def attention(self, q, k, v, mask=None, scale=None):
        if q.shape[-1] != 2:
            raise NotImplementedError("only d_k = 2")
        w = self.softmax(q @ k.T / np.sqrt(2.0))
        return w @ v
'''


def test_part_and_self_comparison_and_declined_examples_are_recorded(tmp_path):
    """part= and self_comparison= reach the evidence per claim; the required capabilities are listed; a
    hypothesis test whose implementation declines some widths passes on the examples that ran and counts
    the declined ones (it would be not applicable as a whole if declines were not counted)."""
    (tmp_path / "test_marks.py").write_text(textwrap.dedent(_MARKER_TESTS), encoding="utf-8")
    (tmp_path / "narrow.py").write_text(textwrap.dedent(_WIDTH_TWO_ONLY), encoding="utf-8")
    out = tmp_path / "results.json"
    result = _run(tmp_path, "test_marks.py", "--attn-impl", "narrow:WidthTwoOnly", "--attn-results", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    by_claim = {e["claim"]: e for e in json.loads(out.read_text(encoding="utf-8"))["evidence"]}
    assert by_claim["softmax-saturation"]["part"] == "default-scale"
    assert by_claim["softmax-saturation"]["self_comparison"] is False
    assert by_claim["softmax-distribution"]["self_comparison"] is True
    assert by_claim["softmax-distribution"]["requires"] == ["softmax"]
    declined = by_claim["convex-combination"]
    assert declined["outcome"] == "passed" and declined["examples_declined"] > 0, declined
    assert declined["examples"] >= 1 and "only d_k = 2" in declined["message"], declined


_CONFORMANCE_TESTS = '''
import numpy as np
import pytest

from attnclaims.reference import softmax as ref_softmax

@pytest.mark.claim("softmax-saturation", kind="conformance")
@pytest.mark.claim("softmax-distribution")
@pytest.mark.requires("softmax")
def test_conforms(impl):
    x = np.array([[1.0, 2.0, 4.0]])
    got = impl.softmax(x)
    assert np.allclose(got, ref_softmax(x)) and np.isclose(got.sum(), 1.0)
'''

_SUBCLASS = '''
from attnclaims.reference.impl import Reference

class OwnReference(Reference):
    name = "own-reference"
'''


@pytest.mark.parametrize("spec, self_compared", [("reference", True), ("subclass:OwnReference", False)])
def test_a_conformance_check_run_on_the_built_in_reference_is_a_self_comparison(tmp_path, spec, self_compared):
    """A conformance check compares the implementation with the reference; on the built-in reference itself it
    compares the reference with itself, so its evidence is a self-comparison (it supports no verdict of the
    reference's column) — only the conformance kind (the same test's other claim keeps its evidence), and
    only the reference's own class (a subclass computes its own way and is compared for real)."""
    (tmp_path / "test_conf.py").write_text(textwrap.dedent(_CONFORMANCE_TESTS), encoding="utf-8")
    (tmp_path / "subclass.py").write_text(textwrap.dedent(_SUBCLASS), encoding="utf-8")
    out = tmp_path / "results.json"
    result = _run(tmp_path, "test_conf.py", "--attn-impl", spec, "--attn-results", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    by_claim = {e["claim"]: e for e in json.loads(out.read_text(encoding="utf-8"))["evidence"]}
    assert by_claim["softmax-saturation"]["outcome"] == "passed"
    assert by_claim["softmax-saturation"]["self_comparison"] is self_compared
    assert by_claim["softmax-distribution"]["self_comparison"] is False


@pytest.mark.parametrize("mark, says", [
    ('part="no-such-part"', "part='no-such-part' is not a part of claim 'softmax-saturation'"),
    ('colour="red"', "claim marker has unknown argument 'colour'"),
    ('self_comparison="yes"', "self_comparison='yes' is not True or False"),
])
def test_a_bad_claim_marker_argument_is_a_usage_error(tmp_path, mark, says):
    (tmp_path / "test_bad.py").write_text(textwrap.dedent(f'''
        import pytest

        @pytest.mark.claim("softmax-saturation", {mark})
        def test_x():
            pass
        '''), encoding="utf-8")
    result = _run(tmp_path, "test_bad.py")
    assert result.returncode == 4 and says in result.stdout + result.stderr, result.stdout + result.stderr


_COUNTING_IMPL = '''
import os

from user_impl import SoftmaxOnly

def make():
    with open(os.environ["RESOLVED_IN"], "a") as fh:  # one line per process that constructs it
        fh.write(f"{os.getpid()}\\n")
    return SoftmaxOnly()
'''


def test_the_xdist_controller_describes_the_implementation_without_resolving_it(project):
    """Under ``-n 2`` the implementation is constructed by the workers that run its tests, never by the
    controller (which runs none): the results file and the last event still describe it, from the
    workers' reports."""
    pytest.importorskip("xdist")
    (project / "counting_impl.py").write_text(textwrap.dedent(_COUNTING_IMPL), encoding="utf-8")
    out, events, resolved = project / "results.json", project / "events.jsonl", project / "resolved.txt"
    os.environ["RESOLVED_IN"] = str(resolved)
    try:
        result = _run(project, "test_user.py", "-n", "2", "--attn-impl", "counting_impl:make",
                      "--attn-results", str(out), "--attn-events", str(events), timeout=300)
    finally:
        del os.environ["RESOLVED_IN"]
    assert result.returncode == 0, result.stdout + result.stderr
    finished = [e for e in _events(events) if e["event"] == "session-finished"]
    (controller,) = {e["pid"] for e in finished}
    pids = {int(line) for line in resolved.read_text(encoding="utf-8").split()}
    assert pids and controller not in pids, (controller, pids)
    described = json.loads(out.read_text(encoding="utf-8"))["implementation"]
    assert described["name"] == finished[0]["implementation"]["name"] == "softmax-only"
    assert described["capabilities"] == ["softmax"] and described["available"] is True
