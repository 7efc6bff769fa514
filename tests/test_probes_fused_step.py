"""The fused probe step (probes.fused) against the reference step it replaces.

Both train the same runs from the same draws; the compiled update does the reference's
float32 arithmetic, so weights agree to float tolerance (a compiler may fuse a multiply and
an add the reference rounds twice), candidates diverge alike, and accuracies are equal.
torch.compile builds C++ kernels on this CPU, Triton kernels on a GPU, from the same code.

The compiled comparisons run in one new interpreter (:func:`in_a_new_process`), with kernels
built for any x86-64 CPU: what is tested is the fused step's arithmetic, the same on every CPU
this suite runs on, not the compiler's code for one chip; a pytest worker has loaded the
libraries of every module before (faiss brings an OpenMP runtime of its own), and a crash in
native code would take the worker down with the rest of its tests, where here it fails one
test, naming the signal.
"""

from __future__ import annotations

import multiprocessing
import platform
import signal

import pytest
import torch
from test_probes_linear import clustered_features, three_runs

from imagenet_cog.probes import fused_step
from imagenet_cog.probes.linear import SGDSchedule, l2_normalise, train_probe_runs, train_probes

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.heavy]


@pytest.fixture(scope="module")
def portable_kernels(tmp_path_factory):
    """For the processes this module starts: inductor's C++ kernels unvectorised (ATen's default
    capability) and, on x86-64, built for any such chip, not -march=native; one kernel cache of their own
    (later processes load what the first built)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATEN_CPU_CAPABILITY", "default")
        if platform.machine() == "x86_64":
            patch.setenv("TORCHINDUCTOR_CPP_MARCH", "x86-64")
        patch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor")))
        yield


def in_a_new_process(function, *arguments, timeout: float = 600) -> None:
    """``function(*arguments)`` in a new interpreter (spawned: nothing of this one's state),
    its assertion errors printed to this test's output; fails on its exit status or signal."""
    process = multiprocessing.get_context("spawn").Process(target=function, args=arguments)
    process.start()
    process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join()
        raise AssertionError(f"{function.__name__}{arguments} still ran after {timeout} s")
    if process.exitcode < 0:
        raise AssertionError(f"{function.__name__}{arguments} died of {signal.Signals(-process.exitcode).name}")
    assert process.exitcode == 0, f"{function.__name__}{arguments} failed (its traceback is in this test's output)"


def fused_runs_equal_the_reference(precision, sample_major):
    # one candidate diverges: rolled back and frozen by both steps alike
    torch.set_num_threads(1)
    arguments = three_runs(precision)
    normalised, labels = arguments[:2]
    reference = train_probe_runs(*arguments, sample_major=sample_major)
    fused = train_probe_runs(*arguments, sample_major=sample_major, fused=True)
    assert fused_step.step_description(True) == "fused"
    for ours, theirs in zip(fused, reference):
        assert ours.diverged == theirs.diverged
        scale = theirs.weight.abs().amax()
        assert (ours.weight - theirs.weight).abs().amax() <= 1e-5 * scale
        assert (ours.bias - theirs.bias).abs().amax() <= 1e-5 * scale
        torch.testing.assert_close(ours.topk_accuracy(normalised, labels), theirs.topk_accuracy(normalised, labels))
    assert fused[1].diverged == [False, True]


def one_fused_probe_equals_the_reference():
    torch.set_num_threads(1)
    features, labels = clustered_features(classes=5, per_class=40, dim=16, seed=2)
    normalised = l2_normalise(features)
    schedule = SGDSchedule(epochs=5, batch_size=32, momentum=0.9)
    reference = train_probes(normalised, labels, 5, [3.0], [1e-4], schedule, seed=7)
    fused = train_probes(normalised, labels, 5, [3.0], [1e-4], schedule, seed=7, fused=True)
    torch.testing.assert_close(fused.weight, reference.weight, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fused.bias, reference.bias, rtol=1e-5, atol=1e-6)


def fused_step_equals_the_reference_everywhere():
    """One probe, then three runs in each precision and layout: one interpreter for all (its
    start and the compiler's are most of the seconds), each case named before it runs."""
    print("one probe, float32", flush=True)
    one_fused_probe_equals_the_reference()
    for precision in ("float32", "bfloat16"):
        for sample_major in (False, True):
            print(f"three runs, {precision}, sample_major={sample_major}", flush=True)
            fused_runs_equal_the_reference(precision, sample_major)


def test_the_fused_step_trains_the_reference_probes_in_each_precision_and_layout(portable_kernels):
    in_a_new_process(fused_step_equals_the_reference_everywhere)


def test_a_crash_in_the_new_process_fails_the_test_naming_the_signal():
    with pytest.raises(AssertionError, match="died of SIGSEGV"):
        in_a_new_process(signal.raise_signal, signal.SIGSEGV)


@pytest.fixture
def no_compiler(monkeypatch, tmp_path):
    """A machine where torch.compile cannot build: no C++ compiler, no cached kernels."""
    import torch._inductor.config as inductor

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setattr(inductor, "fx_graph_cache", False)
    monkeypatch.setattr(inductor.cpp, "cxx", (str(tmp_path / "no-such-compiler"),))
    monkeypatch.setattr(fused_step, "_unavailable", None)
    monkeypatch.setattr(fused_step, "_compiled", {})
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_without_a_compiler_the_reference_step_trains_and_the_result_says_so(no_compiler):
    features, labels = clustered_features(classes=4, per_class=30, dim=16, seed=3)
    normalised = l2_normalise(features)
    schedule = SGDSchedule(epochs=3, batch_size=32, momentum=0.9)
    fused = train_probes(normalised, labels, 4, [2.0, 5.0], [1e-6, 1e-5], schedule, seed=1, fused=True)
    reference = train_probes(normalised, labels, 4, [2.0, 5.0], [1e-6, 1e-5], schedule, seed=1)
    assert torch.equal(fused.weight, reference.weight) and torch.equal(fused.bias, reference.bias)
    assert not fused_step.fused_available()
    description = fused_step.step_description(True)
    assert description.startswith("unfused (fused step unavailable: ") and "compiler" in description
    assert fused_step.step_description(False) == "unfused"


def test_auto_fuses_on_a_gpu_only():
    assert fused_step.resolve_fused("auto", torch.device("cuda")) is True
    assert fused_step.resolve_fused("auto", torch.device("cpu")) is False
    assert fused_step.resolve_fused("on", torch.device("cpu")) is True
    assert fused_step.resolve_fused("off", torch.device("cuda")) is False
    with pytest.raises(ValueError, match="fused must be one of auto, on, off"):
        fused_step.resolve_fused("yes", torch.device("cpu"))


def test_the_fused_step_moves_fewer_bytes_per_step():
    """The counted passes (STEP_BYTES): at the protocol's shape the reference bfloat16 step
    moves ~168 MB, the fused one ~76 MB."""
    shape = dict(runs=1, candidates=1, classes=1000, dim=2048, batch=1024)
    reference = fused_step.step_bytes(**shape, precision="bfloat16", fused=False)
    fused = fused_step.step_bytes(**shape, precision="bfloat16", fused=True)
    assert round(reference / 1e6) == 168 and round(fused / 1e6) == 76
    assert fused_step.step_bytes(**{**shape, "runs": 5}, precision="bfloat16", fused=True) == 5 * fused
