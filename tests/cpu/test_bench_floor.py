"""The floor programs' output as the benchmarks read it: one run, or several with the best kept."""
import pytest

from tickgpu.bench.gpu import parse_floor

RUN_A = """\
NATIVE empty kernel launch throughput                  3.10 us/launch
NATIVE empty kernel launch+sync round trip           p50=    9.63 us  p99=   12.01 us  min=    8.90 us
NATIVE graph H2D+kernel+D2H 1024 floats             p50=   18.39 us  p99=   23.88 us  min=   10.34 us
NATIVE H2D pinned 256MB                                55.41 GB/s
MAILBOX n=  1024 round trip p50=  5.41 us p99=  9.88 us p99.9= 37.61 min=  3.88 bad=0
"""
RUN_B = """\
NATIVE empty kernel launch throughput                  3.40 us/launch
NATIVE empty kernel launch+sync round trip           p50=   10.18 us  p99=   11.50 us  min=    9.20 us
NATIVE graph H2D+kernel+D2H 1024 floats             p50=   11.71 us  p99=   22.98 us  min=   10.72 us
NATIVE H2D pinned 256MB                                55.90 GB/s
MAILBOX n=  1024 round trip p50=  5.50 us p99=  7.49 us p99.9= 20.53 min=  4.14 bad=0
"""


def test_one_run_is_read_as_it_is(tmp_path):
    f = tmp_path / "floor.txt"
    f.write_text(RUN_A)
    floor = parse_floor(str(f))
    assert floor["graph H2D+kernel+D2H 1024 floats"] == {"p50_us": 18.39, "p99_us": 23.88}
    assert floor["empty kernel launch throughput"] == {"us/launch": 3.10}
    assert floor["H2D pinned 256MB"] == {"GB/s": 55.41}
    assert floor["mailbox round trip 1024 floats"] == {"p50_us": 5.41, "p99_us": 9.88}


def test_several_runs_keep_the_best_of_each_figure_and_list_them_all(tmp_path):
    f = tmp_path / "floor.txt"
    f.write_text(RUN_A + "# floor run 2\n" + RUN_B)
    floor = parse_floor(str(f))
    # the lowest p50 with its own run's p99, not the lowest p99 of any run
    assert floor["graph H2D+kernel+D2H 1024 floats"] == {"p50_us": 11.71, "p99_us": 22.98, "runs": [18.39, 11.71]}
    assert floor["empty kernel launch+sync round trip"] == {"p50_us": 9.63, "p99_us": 12.01, "runs": [9.63, 10.18]}
    assert floor["mailbox round trip 1024 floats"]["p50_us"] == 5.41
    # a bandwidth keeps its highest run, a launch cost its lowest
    assert floor["H2D pinned 256MB"] == {"GB/s": 55.90, "runs": [55.41, 55.90]}
    assert floor["empty kernel launch throughput"] == {"us/launch": 3.10, "runs": [3.10, 3.40]}


def test_no_file_gives_no_floor(tmp_path):
    assert parse_floor(None) == {}
    assert parse_floor(str(tmp_path / "missing.txt")) == {}


def test_the_greeks_tick_reference_lines_are_read(tmp_path):
    """benchmarks/floor/greeks_tick.cu prints in the floor programs' format."""
    f = tmp_path / "floor.txt"
    f.write_text("NATIVE greeks tick f32 1024 in+graph+out                p50=   15.52 us  p99=   27.90 us  min=   13.10 us\n"
                 "NATIVE greeks tick f32 1024 graph only                  p50=   10.21 us  p99=   20.70 us  min=    9.70 us\n")
    floor = parse_floor(str(f))
    assert floor["greeks tick f32 1024 in+graph+out"] == {"p50_us": 15.52, "p99_us": 27.90}
    assert floor["greeks tick f32 1024 graph only"]["p50_us"] == 10.21


def test_targets_set_the_tick_beside_the_floor_and_the_same_work_in_c():
    from tickgpu.bench.gpu import evaluate_targets

    res = {"floor": {"graph H2D+kernel+D2H 1024 floats": {"p50_us": 12.0, "p99_us": 20.0},
                     "greeks tick f32 1024 in+graph+out": {"p50_us": 15.0, "p99_us": 25.0}},
           "latency": {"tickgpu_greeks_f32_numpy_1024": {"p50_us": 30.0}, "torch_eager_greeks_f32_numpy_1024":
                       {"p50_us": 900.0}, "tickgpu_bound_greeks_f32_numpy_1024": {"p50_us": 21.0}}}
    res["latency"]["tickgpu_bound_mapped_greeks_f32_numpy_1024"] = {"p50_us": 13.2}
    res["floor"]["greeks tick f32 1024 graph only"] = {"p50_us": 11.0, "p99_us": 14.0}
    t = evaluate_targets(res)
    assert t["latency_1024_bound_mapped_over_floor_graph<=1.3"] == pytest.approx(1.1)
    assert t["latency_1024_bound_mapped_over_C_graph_only"] == pytest.approx(1.2)
    assert t["latency_1024_over_floor_graph<=1.3"] == 2.5
    assert t["latency_1024_bound_over_floor_graph<=1.3"] == 1.75
    assert t["same_work_C_over_floor_graph"] == 1.25
    assert t["latency_1024_over_same_work_C"] == 2.0
    assert t["latency_1024_bound_over_same_work_C"] == 1.4
    # without the reference program's lines, no same-work ratios
    del res["floor"]["greeks tick f32 1024 in+graph+out"]
    t = evaluate_targets(res)
    assert not any("same_work" in k for k in t)


def test_targets_set_the_device_tick_beside_cupy_torch_and_the_c_launch():
    from tickgpu.bench.gpu import evaluate_targets

    res = {"floor": {"empty kernel launch+sync round trip": {"p50_us": 8.0, "p99_us": 9.0}},
           "device_tick": {"f32": {"tickgpu_greeks": {"p50_us": 100.0}, "tickgpu_bound": {"p50_us": 10.0},
                                   "cupy_elementwise": {"p50_us": 40.0}, "torch_eager": {"p50_us": 400.0}}}}
    t = evaluate_targets(res)
    assert t["device_tick_1024_cupy_elementwise_over_bound"] == 4.0
    assert t["device_tick_1024_cupy_elementwise_over_call"] == 0.4
    assert t["device_tick_1024_torch_eager_over_bound"] == 40.0
    assert t["device_tick_1024_bound_over_C_launch_sync"] == 1.25
    del res["floor"]
    assert "device_tick_1024_bound_over_C_launch_sync" not in evaluate_targets(res)


def test_tick_parts_take_a_call_apart_on_the_mock(gpu_ctx):
    """The latency section's breakdown runs the staged tick's own pieces and leaves calls right."""
    import numpy as np

    import tickgpu
    from tickgpu.bench.gpu import option_inputs, tick_parts

    x = option_inputs(np, 48, np.float32, seed=3)

    def both():
        return (tickgpu.greeks(**x, dtype=np.float32, backend="gpu"),
                tickgpu.greeks(x["spot"], x["strike"], 0.5, 0.01, 0.2, dtype=np.float32, backend="gpu"))

    before = both()
    parts = tick_parts(x, np.float32, 20)
    for key in ("native_roundtrip", "graph_only", "stage_in", "stage_out_after_gpu", "call"):
        assert parts[key]["n"] > 0 and parts[key]["p50_us"] > 0, key
    assert parts["python_p50_us"] == parts["call"]["p50_us"] - parts["native_roundtrip"]["p50_us"]
    assert parts["mapped"] is True
    # Calls after it give what they gave before, arrays and single values alike (the parts' copies
    # leave the single-value slots holding the arrays' values: the next call must refill them).
    after = both()
    for a, b in zip(before, after):
        for name in ("price", "delta", "charm"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


@pytest.mark.parametrize("graph,mapped,mode", [(11.36, 10.45, "fast"), (11.28, 11.68, "fast"), (18.34, 10.12, "slow"),
                                              (None, 10.0, None), (12.0, None, None)])
def test_the_floor_graphs_mode_is_told_and_noted_in_both_suites(graph, mapped, mode, capsys):
    """Runs whose every process had the floor graph in its slow mode are marked (their ratios to it
    are not comparable); the zero-copy mapped kernel of the same runs is the yardstick."""
    from tickgpu.bench import gpu, quant

    floor = {}
    if graph is not None:
        floor["graph H2D+kernel+D2H 1024 floats"] = {"p50_us": graph, "p99_us": 20.0}
    if mapped is not None:
        floor["zero-copy mapped kernel 1024 floats"] = {"p50_us": mapped, "p99_us": 20.0}
    assert gpu.floor_graph_mode(floor) == mode
    for suite in (gpu, quant):
        t = suite.evaluate_targets({"floor": floor})
        assert t.get("floor_graph_mode") == mode
        assert ("floor_graph_note" in t) == (mode == "slow")
    assert ("WARNING" in capsys.readouterr().out) == (mode == "slow")


def test_sustained_times_the_queued_calls_after_the_warm_ones(monkeypatch):
    """`sustained` starts the board's sampling, queues warm + calls, times only the last `calls`
    between two events recorded around them, and stops the sampling once they are done."""
    import types

    from tickgpu.bench import gpu

    log = []

    class Event:
        def record(self):
            log.append("record")

        def synchronize(self):
            log.append("sync")

    device = types.SimpleNamespace(pci_bus_id="0000:19:00.0")
    cp = types.SimpleNamespace(cuda=types.SimpleNamespace(Event=Event, get_elapsed_time=lambda a, b: 250.0,
                                                          Device=lambda: device))
    monkeypatch.setattr(gpu, "board_sampler", lambda bus: log.append(("sampler", bus)) or "S")
    monkeypatch.setattr(gpu, "board_samples", lambda s: log.append(("samples", s)) or {"sm_clock_mhz": 1545.0})
    r = gpu.sustained(cp, lambda: log.append("call"), calls=100, warm=20)
    assert log == ([("sampler", "0000:19:00.0")] + ["call"] * 20 + ["record"] + ["call"] * 100
                   + ["record", "sync", ("samples", "S")])
    assert r == {"s": 0.25 / 100, "calls": 100, "sm_clock_mhz": 1545.0}
    thr = {"f64": {"fraction_of_copy_bw": 0.85, "fraction_of_copy_bw_sustained": 0.82}}
    t = gpu.evaluate_targets({"throughput": thr})
    assert t["greeks_f64_fraction_of_copy_bw_sustained"] == 0.82


def test_board_samples_are_the_medians_of_what_nvidia_smi_printed():
    """The sampler's output as nvidia-smi prints it (clock, power per line; a line cut short when it
    is stopped is dropped); no sampler or no sample gives nothing."""
    import types

    from tickgpu.bench import gpu

    def sampler(out):
        return types.SimpleNamespace(terminate=lambda: None, communicate=lambda timeout: (out, ""))

    got = gpu.board_samples(sampler("1545, 661.2\n1560, 640.0\n1530, 700.5\n15"))
    assert got == {"sm_clock_mhz": 1545.0, "power_w": 661.2, "board_samples": 3}
    assert gpu.board_samples(sampler("")) == {}
    assert gpu.board_samples(None) == {}


def test_sustained_blocks_fill_their_seconds():
    from tickgpu.bench import gpu

    assert gpu.sustained_calls(3.7e-3, 1.2) == 325      # float64 greeks at 1e8 options
    assert gpu.sustained_calls(1.5e-3, 1.2) == 800
    assert gpu.sustained_calls(1.0, 1.2) == 20            # never fewer than 20
