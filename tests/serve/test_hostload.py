"""Machine load sampling (serve/hostload.py): /proc parsing, shares and the window summary."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agentic_kvc.serve.hostload import (
    HostLoadSampler,
    TreeReading,
    cpu_shares,
    own_and_others,
    read_cpu_times,
    read_loadavg,
    read_tree,
)
from agentic_kvc.serve.neighbours import busy_neighbours

STAT = """cpu  {u} 0 {s} {i} 0 0 0 {st} 0 0
cpu0 {u0} 0 {s} {i} 0 0 0 {st} 0 0
cpu1 {u1} 0 0 {i} 0 0 0 0 0 0
intr 1 2 3
"""


def _write(path: Path, text: str) -> None:
    # Atomic, as /proc is: the sampler thread must never read half a file.
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _write_stat(path: Path, u: int, s: int, i: int, st: int) -> None:
    _write(path, STAT.format(u=u, s=s, i=i, st=st, u0=u, u1=0))


def test_reads_proc_files(tmp_path: Path) -> None:
    stat, load = tmp_path / "stat", tmp_path / "loadavg"
    _write_stat(stat, 100, 20, 700, 5)
    load.write_text("1.50 0.75 0.25 3/123 4567\n")
    cpus = read_cpu_times(stat)
    assert set(cpus) == {"cpu", "cpu0", "cpu1"}
    assert cpus["cpu"][0] == 100 and cpus["cpu"][7] == 5
    assert read_loadavg(load) == {
        "load1": 1.5,
        "load5": 0.75,
        "load15": 0.25,
        "runnable": 3,
        "tasks": 123,
    }
    assert read_loadavg(tmp_path / "missing") is None
    assert read_cpu_times(tmp_path / "missing") == {}


def test_shares_are_deltas_over_the_interval() -> None:
    a = (100, 0, 20, 700, 0, 0, 0, 5)
    b = (160, 0, 30, 720, 0, 0, 0, 15)  # +60 user, +10 system, +20 idle, +10 steal = 100
    sh = cpu_shares(a, b)
    assert sh is not None
    assert sh["user"] == pytest.approx(0.6) and sh["system"] == pytest.approx(0.1)
    assert sh["steal"] == pytest.approx(0.1) and sh["idle"] == pytest.approx(0.2)
    assert sh["busy"] == pytest.approx(0.8)
    assert sum(sh[k] for k in ("user", "nice", "system", "idle", "iowait", "irq", "steal")) == (
        pytest.approx(1.0)
    )
    assert cpu_shares(a, a) is None  # no time passed


def test_sampler_summarises_a_changing_machine(tmp_path: Path) -> None:
    stat, load = tmp_path / "stat", tmp_path / "loadavg"
    _write_stat(stat, 0, 0, 1000, 0)
    _write(load, "0.10 0.10 0.10 1/100 1\n")
    sampler = HostLoadSampler(0.02, stat_path=stat, loadavg_path=load).start()
    time.sleep(0.1)
    sampler.mark("replay")
    # During the replay: 300 user, 100 steal and 300 idle jiffies, and a higher load.
    _write_stat(stat, 300, 0, 1300, 100)
    _write(load, "3.00 1.00 0.50 4/100 1\n")
    time.sleep(0.1)
    sampler.close("replay")
    _write_stat(stat, 300, 0, 2300, 100)  # then idle again
    time.sleep(0.05)
    out = sampler.stop()
    assert out["loadavg_start"]["load1"] == 0.1 and out["loadavg_end"]["load1"] == 3.0
    run = out["run"]
    assert run["samples"] >= 4
    assert run["load1"]["max"] == 3.0 and 0.1 < run["load1"]["mean"] < 3.0
    assert run["shares"]["steal"]["max"] == pytest.approx(100 / 700, abs=1e-4)  # one interval
    assert run["overall"]["steal"] == pytest.approx(100 / 1700, abs=1e-4)
    assert run["overall"]["busy"] == pytest.approx(400 / 1700, abs=1e-4)
    assert set(run["per_cpu"]) == {"cpu0", "cpu1"}
    replay = out["replay"]
    assert replay["overall"]["steal"] == pytest.approx(100 / 700, abs=1e-4)
    assert replay["overall"]["user"] == pytest.approx(300 / 700, abs=1e-4)
    assert replay["duration_s"] < out["duration_s"]


def test_sampler_on_this_machine() -> None:
    if not Path("/proc/stat").is_file():
        pytest.skip("no /proc")
    with HostLoadSampler(0.05) as sampler:
        sum(i * i for i in range(300_000))  # some CPU so time passes in jiffies
        time.sleep(0.2)
    out = sampler.summary()
    assert out["run"]["samples"] >= 2
    overall = out["run"]["overall"]
    assert overall is not None and 0.0 <= overall["busy"] <= 1.0
    assert out["loadavg_start"] is not None
    # The speed probe ran at start and at stop (a VM can slow down at one load).
    for key in ("speed_start", "speed_end"):
        assert 0 < out[key]["python_ms"]["best"] <= out[key]["python_ms"]["median"]


def test_sampler_without_the_probe_records_none() -> None:
    with HostLoadSampler(10.0, probe=False) as sampler:
        pass
    out = sampler.summary()
    assert "speed_start" not in out and "speed_end" not in out


def _proc_stat(
    proc: Path, pid: int, ppid: int, jiffies: tuple[int, int, int, int], states: str = "S"
) -> None:
    """A fake /proc/<pid>: the process's stat and one task per letter of `states`."""
    (proc / str(pid)).mkdir(parents=True, exist_ok=True)

    def line(state: str) -> str:
        # A command name with a space and a parenthesis: fields are read after the last ')'.
        fields = [state, str(ppid), *["0"] * 9, *map(str, jiffies), "20", "0"]
        return f"{pid} (odd (name) x) {' '.join(fields)}\n"

    _write(proc / str(pid) / "stat", line(states[0]))
    for k, state in enumerate(states):
        task = proc / str(pid) / "task" / str(pid + 1000 * k)
        task.mkdir(parents=True, exist_ok=True)
        _write(task / "stat", line(state))


def test_tree_sums_a_process_and_its_descendants_against_the_rest(tmp_path: Path) -> None:
    _proc_stat(tmp_path, 10, 1, (5, 1, 0, 0), "RS")  # the root: one thread runnable
    _proc_stat(tmp_path, 11, 10, (100, 20, 3, 2), "RRS")  # a child, with reaped children
    _proc_stat(tmp_path, 12, 11, (7, 0, 0, 0))  # a grandchild, asleep
    _proc_stat(tmp_path, 20, 1, (999, 0, 0, 0), "RR")  # a neighbour: not ours
    _proc_stat(tmp_path, 21, 1, (5, 0, 0, 0), "S")  # an idle one
    assert read_tree(10, tmp_path) == TreeReading(6 + 125 + 7, own_runnable=3, others_runnable=2)
    assert read_tree(11, tmp_path) == TreeReading(125 + 7, own_runnable=2, others_runnable=3)
    assert read_tree(99, tmp_path) is None


def test_busy_cores_split_into_own_and_others() -> None:
    a = (0, 0, 0, 0, 0, 0, 0, 0)
    b = (120, 0, 30, 40, 0, 0, 0, 10)  # 200 jiffies on 2 CPUs: 160 busy (1.6 cores)
    split = own_and_others(a, b, 2, own_jiffies=100)  # we used 1 core of the 1.6
    assert split == {"own_cores": 1.0, "others_cores": pytest.approx(0.6)}
    # Our count can run ahead of the machine's by a tick: never negative others.
    assert own_and_others(a, b, 2, own_jiffies=170) == {"own_cores": 1.6, "others_cores": 0.0}
    assert own_and_others(a, a, 2, own_jiffies=0) is None


def test_sampler_splits_this_tree_from_a_busy_neighbour() -> None:
    if not Path("/proc/self/stat").is_file():
        pytest.skip("no /proc")
    with busy_neighbours(1) as pids:
        assert len(pids) == 1 and Path(f"/proc/{pids[0]}").exists()
        with HostLoadSampler(0.2) as sampler:
            time.sleep(1.0)
    run = sampler.summary()["run"]
    # The neighbour spins a whole core; we mostly sleep.
    assert run["cores"]["others_cores"] > 0.6
    assert run["cores"]["own_cores"] < 0.4
    assert run["others_cores"]["mean"] > 0.6  # per sample too
    assert run["others_runnable"]["mean"] >= 0.9  # the spinner is always runnable
    time.sleep(0.1)
    status = Path(f"/proc/{pids[0]}/stat")
    assert not status.exists() or status.read_text().split(")")[1].split()[0] == "Z"
