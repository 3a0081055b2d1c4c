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


def test_module_attr_factory_and_not_applicable_are_recorded(project):
    out = project / "results.json"
    result = _run(project, "test_user.py", "--attn-impl", "user_impl:make", "--attn-results", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    payload = json.loads(out.read_text(encoding="utf-8"))
    assert payload["implementation"]["name"] == "softmax-only"
    assert payload["implementation"]["capabilities"] == ["softmax"]
    by_claim = {e["claim"]: e for e in payload["evidence"]}
    assert by_claim["softmax-distribution"]["outcome"] == "passed"
    assert by_claim["softmax-distribution"]["implementation"] == "softmax-only"
    assert by_claim["convex-combination"]["outcome"] == "not-applicable"
    assert by_claim["convex-combination"]["message"] == "not applicable: softmax-only has no attention"


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
    result = _run(tmp_path, "--pyargs", "attnclaims.tests.test_s31_attention", "-k",
                  "test_softmax_is_a_distribution or test_output_is_in_the_convex_hull",
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
