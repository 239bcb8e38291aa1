"""xlalab.profile on traces captured here: a tiny function in graph and XLA modes (seconds on a CPU)."""

from __future__ import annotations

import json

import pytest
import tensorflow as tf

from xlalab import hlo, profile

pytest.importorskip("xprof")

STEPS = 3


def _step(x):
    """float32[64, 64] -> float32 scalar: a matmul, then elementwise ops XLA fuses, then a reduction."""
    return tf.reduce_sum(tf.nn.relu(tf.matmul(x, x)) * 2.0 + 1.0)


@pytest.fixture(scope="module")
def x():
    return tf.random.normal([64, 64], seed=0)


@pytest.fixture(scope="module")
def graph_profile(x, tmp_path_factory):
    return profile.capture(tf.function(_step), x, steps=STEPS, logdir=tmp_path_factory.mktemp("graph"))


@pytest.fixture(scope="module")
def xla_profile(x, tmp_path_factory):
    return profile.capture(tf.function(_step, jit_compile=True), x, steps=STEPS,
                           logdir=tmp_path_factory.mktemp("xla"))


def test_capture_writes_an_xspace_under_the_logdir(graph_profile):
    assert graph_profile.steps == STEPS
    assert graph_profile.xspace and all(p.endswith(".xplane.pb") for p in graph_profile.xspace)
    assert graph_profile.run_dir.startswith(graph_profile.logdir)
    assert "framework_op_stats" in profile.tool_names(graph_profile)


def test_from_logdir_finds_the_same_capture(graph_profile):
    again = profile.from_logdir(graph_profile.logdir, steps=STEPS)
    assert again.run_dir == graph_profile.run_dir and again.xspace == graph_profile.xspace
    with pytest.raises(FileNotFoundError):
        profile.from_logdir(graph_profile.run_dir, steps=STEPS)


def test_step_markers_give_one_time_per_step(graph_profile):
    times = profile.step_times_ms(graph_profile)
    assert len(times) == STEPS
    assert all(t > 0 for t in times)


def test_framework_ops_name_the_graph_ops(graph_profile):
    rows = profile.framework_ops(graph_profile)
    assert rows, "framework_op_stats gave no rows"
    assert "IDLE" not in {r["type"] for r in rows}
    assert any("MatMul" in r["type"] for r in rows), [r["type"] for r in rows]
    assert all(r["us_per_step"] >= 0 for r in rows)
    assert [r["us_per_step"] for r in rows] == sorted((r["us_per_step"] for r in rows), reverse=True)
    types = profile.by_type(rows)
    assert sum(t["ops"] for t in types) == len(rows)
    assert sum(t["us_per_step"] for t in types) == pytest.approx(sum(r["us_per_step"] for r in rows))


def test_hlo_ops_match_the_launches_of_the_module_the_trace_ran(xla_profile):
    ops = profile.hlo_ops(xla_profile)
    assert ops, "no trace event carried an hlo_op"
    assert sum(o.share for o in ops) == pytest.approx(1.0)
    assert all(o.calls == pytest.approx(1.0) for o in ops), [(o.name, o.calls) for o in ops]
    text = profile.hlo_module_text(xla_profile)
    assert text.startswith("HloModule")
    launches = {k["name"] for k in hlo.summary(text)["kernel_list"]}
    assert {o.name for o in ops} == launches
    # The matrix product is its own launch (a dot, or a library call on a GPU) whatever the backend.
    matmuls = {op.name for op in hlo.matrix_ops(text)}
    assert matmuls, "the module the trace ran has no matrix product, but _step multiplies x by x"
    assert matmuls <= {o.name for o in ops}, (matmuls, [o.name for o in ops])


def test_graph_mode_has_no_hlo_ops_and_xla_mode_one_cluster(graph_profile, xla_profile):
    assert profile.hlo_ops(graph_profile) == []
    with pytest.raises(ValueError, match="no XLA op ran"):
        profile.hlo_module_text(graph_profile)
    clusters = [r for r in profile.framework_ops(xla_profile) if r["type"].startswith("__inference")]
    assert clusters, [r["type"] for r in profile.framework_ops(xla_profile)]


def test_a_module_compiled_before_the_capture_is_not_taken_for_the_one_it_ran(x, tmp_path):
    """The converters list every module the process compiled; graph mode still has no module text."""
    earlier = tf.function(lambda v: tf.reduce_max(v) * 3.0, jit_compile=True)
    earlier(x)
    prof = profile.capture(tf.function(_step), x, steps=1, logdir=tmp_path)
    assert profile.hlo_ops(prof) == []
    with pytest.raises(ValueError, match="no XLA op ran"):
        profile.hlo_module_text(prof)


def test_kernels_is_a_list_on_any_backend(xla_profile):
    rows = profile.kernels(xla_profile)
    assert isinstance(rows, list)
    if not tf.config.list_physical_devices("GPU"):
        assert rows == []


def test_gviz_rows_reads_a_data_table():
    table = json.loads('{"cols": [{"id": "a"}, {"id": "b"}], '
                       '"rows": [{"c": [{"v": 1}, {"v": "x"}]}, {"c": [null, {"v": 2}]}]}')
    assert profile.gviz_rows(table) == [{"a": 1, "b": "x"}, {"a": None, "b": 2}]


def test_hlo_ops_prefer_device_kernels_over_host_events():
    """A GPU trace (synthetic events): a kernel event per launch on the device; host events with hlo_op ignored."""
    prof = profile.Profile("/tmp/none", "/tmp/none/plugins/profile/run", [], steps=2)
    mod = {"hlo_module": "m.1"}
    events = [profile.TraceEvent("/host:CPU", "python", "thunk", 0.0, 50.0, {**mod, "hlo_op": "fusion.1"})]
    for _step in range(2):
        events += [profile.TraceEvent("/device:GPU:0", "Stream #14", "loop_fusion", 10.0, 3.0,
                                      {**mod, "hlo_op": "fusion.1"}),
                   profile.TraceEvent("/device:GPU:0", "Stream #14", "gemm_kernel", 20.0, 7.0,
                                      {**mod, "hlo_op": "custom-call.2"}),
                   profile.TraceEvent("/device:GPU:0", "Stream #14", "gemm_splitk", 30.0, 2.0,
                                      {**mod, "hlo_op": "custom-call.2"})]
    ops = profile.hlo_ops(prof, events=events)
    assert [(o.name, o.calls, o.us_per_step, o.process) for o in ops] == [
        ("custom-call.2", 2.0, 9.0, "/device:GPU:0"), ("fusion.1", 1.0, 3.0, "/device:GPU:0")]
    assert sum(o.share for o in ops) == pytest.approx(1.0)
    assert profile.hlo_ops(prof, events=events, module="other") == []


def test_reading_a_capture_prints_no_processor_noise(xla_profile, capfd):
    """The converters' C++ log says "No UnifiedProfileProcessor registered for tool: ..." on every call (fd 2);
    profile's readers hold those lines back."""
    capfd.readouterr()
    profile.tool_names(xla_profile)
    assert profile.hlo_ops(xla_profile)
    assert profile.hlo_module_text(xla_profile).startswith("HloModule")
    profile.kernels(xla_profile)
    profile.framework_ops(xla_profile)
    out, err = capfd.readouterr()
    assert "ProfileProcessor registered" not in out + err, err


def test_quiet_converter_log_passes_every_other_line_on(capfd):
    import os

    with profile.quiet_converter_log():
        os.write(2, b"E0000 unified_profile_processor_factory.cc:65] No UnifiedProfileProcessor registered for "
                    b"tool: trace_viewer\nkept 1\n")
        os.write(2, b"E0000 profile_processor_factory.cc:46] No ProfileProcessor registered for tool: x\nkept 2\n")
    assert capfd.readouterr().err == "kept 1\nkept 2\n"
    with pytest.raises(RuntimeError), profile.quiet_converter_log():
        os.write(2, b"before the error\n")
        raise RuntimeError("the block's error goes through")
    assert capfd.readouterr().err == "before the error\n"


def test_step_timeline_and_its_plot():
    """One step's HLO ops on one axis: only the chosen step's, device events over host ones, busy time merged."""
    import matplotlib

    matplotlib.use("Agg")
    from xlalab import plot
    from xlalab.profile import Profile, TraceEvent, step_timeline

    prof = Profile(logdir="/x", run_dir="/x", xspace=[], steps=2)
    ev = [TraceEvent("/host:CPU", "python", "train 0", 0.0, 100.0),
          TraceEvent("/host:CPU", "python", "train 1", 200.0, 100.0),
          TraceEvent("/host:CPU", "tf_XLA", "fusion", 10.0, 30.0, {"hlo_op": "fusion", "hlo_module": "m"}),
          TraceEvent("/host:CPU", "tf_XLA", "dot", 210.0, 40.0, {"hlo_op": "dot.1", "hlo_module": "m"}),
          TraceEvent("/host:CPU", "tf_XLA_2", "add", 230.0, 40.0, {"hlo_op": "add", "hlo_module": "m"}),
          TraceEvent("/host:CPU", "python", "other", 220.0, 5.0)]
    t = step_timeline(prof, events=ev)
    assert t["step"] == 1 and t["step_us"] == 100.0
    assert [(o["op"], o["start_us"]) for o in t["ops"]] == [("dot.1", 10.0), ("add", 30.0)]
    assert t["lanes"] == ["/host:CPU / tf_XLA", "/host:CPU / tf_XLA_2"]
    assert t["busy_us"] == 60.0          # [10, 50] and [30, 70] overlap: 60 us with something running
    assert [o["op"] for o in step_timeline(prof, step=0, events=ev)["ops"]] == ["fusion"]
    gpu = ev + [TraceEvent("/device:GPU:0", "Stream #1", "k", 212.0, 8.0, {"hlo_op": "dot.1", "hlo_module": "m"})]
    assert [o["lane"] for o in step_timeline(prof, events=gpu)["ops"]] == ["/device:GPU:0 / Stream #1"]
    with pytest.raises(ValueError, match="step=5"):
        step_timeline(prof, step=5, events=ev)
    with pytest.raises(ValueError, match="no step markers"):
        step_timeline(prof, events=ev[2:])
    ax = plot.timeline(t, category=lambda o: "matrix" if o["op"].startswith("dot") else "other")
    assert len(ax.collections) == 2 and [p.get_label() for p in ax.get_legend().get_patches()] == ["matrix", "other"]
