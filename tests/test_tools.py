"""tools/inspect_store.py, tools/verify.py, tools/export.py, tools/import_dqn_replay.py: run as a user runs them."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from chunkstore import ChunkedArray, hdf5
from chunkstore import hdf5 as fmt

REPO = Path(__file__).resolve().parent.parent
TOOLS = REPO / "tools"


def run_tool(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOLS / f"{name}.py"), *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def tool_module(name: str):
    spec = importlib.util.spec_from_file_location(f"chunkstore_tool_{name}", TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def frames(n: int, shape=(84, 84)) -> np.ndarray:
    """Moving bars: consecutive frames alike, each one distinct."""
    out = np.zeros((n, *shape), np.uint8)
    for t in range(n):
        out[t, ..., (t * 3) % shape[0], :] = 200
        out[t, ..., :, (t * 5) % shape[1]] = 100
    return out


def save_store(path: Path, obs: np.ndarray, codec: str = "zstd3", extras=None, **arrays) -> Path:
    arr = ChunkedArray(len(obs), obs.shape[1:], obs.dtype, chunk_len=16, codec=codec,
                       name="observations")
    arr[:] = obs
    all_arrays = {"observations": arr}
    for name, data in arrays.items():
        extra = ChunkedArray(len(data), data.shape[1:], data.dtype, chunk_len=16, codec="lz4-block")
        extra[:] = data
        all_arrays[name] = extra
    fmt.save(path, all_arrays, extras or {}, {"game": "Test", "seed": 0}, progress=False)
    return path


@pytest.fixture
def store_path(tmp_path) -> Path:
    dones = np.zeros(100, np.float32)
    dones[[29, 69]] = 1  # episodes [0, 30), [30, 70), [70, 100)
    return save_store(tmp_path / "buf.h5", frames(100), extras={"dones": dones},
                      stacks=frames(40, (4, 84, 84)))


# -- every tool answers --help, and none breaks `import inspect` -----------------------------
@pytest.mark.parametrize("tool", ["inspect_store", "verify", "export", "import_dqn_replay"])
def test_help(tool):
    out = run_tool(tool, "--help")
    assert out.returncode == 0 and out.stdout.startswith(f"usage: {tool}.py "), out.stderr


def test_tools_dir_on_sys_path_keeps_the_stdlib_inspect():
    code = ("import sys; sys.path.insert(0, 'tools'); import inspect, dataclasses, numpy; "
            "assert callable(inspect.signature), inspect.__file__; print(inspect.__file__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "tools" not in Path(out.stdout.strip()).parts


# -- inspect -------------------------------------------------------------------------------------
def test_inspect_table(store_path):
    out = run_tool("inspect_store", store_path)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for word in ("observations", "stacks", "ratio", "zstd/3", "lz4-block/0", "7/7", "dones",
                 "game", "n/a", "chunk min/median/max"):
        assert word in text, word
    assert "plain h5py cannot decode" in text  # the lz4 array has the private filter
    row = next(line for line in text.splitlines() if line.startswith("observations"))
    assert "(100, 84, 84)" in row and "zstd" in row and re.search(r" \d+\.\dx ", row)


def test_inspect_json_numbers(store_path):
    out = run_tool("inspect_store", store_path, "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    obs = next(a for a in info["arrays"] if a["name"] == "observations")
    assert obs["chunks_stored"] == obs["chunks_total"] == 7 and obs["chunk_len"] == 16
    assert obs["raw_bytes"] == 100 * 84 * 84 and obs["ratio"] > 1
    assert obs["chunk_bytes_min"] <= obs["chunk_bytes_median"] <= obs["chunk_bytes_max"]
    assert obs["hdf5_filter"] == "zstd" and obs["cache"] == "n/a"
    assert info["attrs"] == {"game": "Test", "seed": 0}
    assert info["extras"] == [{"name": "dones", "shape": [100], "dtype": "float32", "nbytes": 400}]


def test_inspect_unreadable(tmp_path):
    (tmp_path / "x.h5").write_bytes(b"not hdf5" * 100)
    out = run_tool("inspect_store", tmp_path / "x.h5")
    assert out.returncode == 2 and "cannot read" in out.stderr


# -- verify --------------------------------------------------------------------------------------
def test_verify_exit_codes(store_path, tmp_path):
    ok = run_tool("verify", store_path)
    assert ok.returncode == 0 and ok.stdout.startswith("OK"), ok.stderr
    spans = hdf5.chunk_spans(store_path, "stacks")  # format 3: HDF5 chunks hold several chunks
    _, offset, size = spans[spans[:, 0] == 1][0]
    with open(store_path, "r+b") as fh:
        fh.seek(int(offset + size // 2))
        b = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([b[0] ^ 0x5A]))
    bad = run_tool("verify", store_path, "--no-progress")
    assert bad.returncode == 1
    assert bad.stdout.splitlines()[0].startswith("CORRUPT stacks chunk 1:")
    (tmp_path / "junk.h5").write_bytes(b"\0" * 4096)
    junk = run_tool("verify", tmp_path / "junk.h5")
    assert junk.returncode == 2 and "cannot read" in junk.stderr
    assert run_tool("verify", tmp_path / "missing.h5").returncode == 2


# -- export --------------------------------------------------------------------------------------
def test_export_pngs_and_gif_as_subprocess(store_path, tmp_path):
    out = run_tool("export", store_path, "--start", 10, "--stop", 13, "--out", tmp_path / "png")
    assert out.returncode == 0, out.stderr
    names = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert names == [f"observations_00000{i}.png" for i in (10, 11, 12)]
    img = Image.open(tmp_path / "png" / names[0])
    assert img.size == (84, 84) and img.mode == "L"
    assert np.array_equal(np.asarray(img), frames(100)[10])
    gif = tmp_path / "ep1.gif"
    out = run_tool("export", store_path, "--episode", 1, "--gif", gif, "--scale", 2)
    assert out.returncode == 0, out.stderr
    with Image.open(gif) as g:
        assert g.n_frames == 40 and g.size == (168, 168)  # episode [30, 70)


def test_export_stacks(store_path, tmp_path):
    export = tool_module("export")
    assert export.main([str(store_path), "--array", "stacks", "--start", "5", "--stop", "7",
                        "--out", str(tmp_path / "side")]) == 0
    side = sorted((tmp_path / "side").iterdir())
    assert len(side) == 2 and Image.open(side[0]).size == (4 * 84, 84)
    want = np.concatenate(list(frames(40, (4, 84, 84))[5]), axis=1)
    assert np.array_equal(np.asarray(Image.open(side[0])), want)
    assert export.main([str(store_path), "--array", "stacks", "--start", "5", "--stack", "split",
                        "--out", str(tmp_path / "split")]) == 0
    split = sorted(p.name for p in (tmp_path / "split").iterdir())
    assert split == [f"stacks_0000005_{k}.png" for k in range(4)]
    assert export.main([str(store_path), "--array", "stacks", "--stop", "12",
                        "--gif", str(tmp_path / "s.gif")]) == 0
    with Image.open(tmp_path / "s.gif") as g:
        assert g.n_frames == 12 and g.size == (84, 84)  # newest frame of each stack


@pytest.mark.parametrize(
    ("shape", "size", "mode"),
    [((84, 84, 4), (4 * 84, 84), "L"),  # channel-last stack
     ((60, 40, 3), (40, 60), "RGB"),  # RGB
     ((3, 60, 40), (40, 60), "RGB"),  # channel-first RGB (VecTransposeImage)
     ((2, 30, 20, 3), (40, 30), "RGB"),  # stack of RGB frames
     ((30, 20, 1), (20, 30), "L")],
)
def test_export_layouts(tmp_path, shape, size, mode):
    rng = np.random.default_rng(0)
    path = save_store(tmp_path / "s.h5", rng.integers(0, 256, (5, *shape), dtype=np.uint8))
    assert tool_module("export").main([str(path), "--start", "2", "--out", str(tmp_path)]) == 0
    img = Image.open(tmp_path / "observations_0000002.png")
    assert (img.size, img.mode) == (size, mode)


def test_export_float_observations_are_scaled_with_a_note(tmp_path, capsys):
    obs = np.linspace(0, 1, 5 * 84 * 84, dtype=np.float32).reshape(5, 84, 84)
    path = save_store(tmp_path / "f.h5", obs)
    assert tool_module("export").main([str(path), "--start", "4", "--out", str(tmp_path)]) == 0
    assert "scaled by 255" in capsys.readouterr().err
    px = np.asarray(Image.open(tmp_path / "observations_0000004.png"))
    assert px.dtype == np.uint8 and px.max() == 255 and px.min() > 200
    wide = save_store(tmp_path / "w.h5", obs * 1000 - 500, extras={"episode": np.repeat([0, 1], [2, 3])})
    assert tool_module("export").main([str(wide), "--episode", "1", "--out", str(tmp_path / "w")]) == 0
    assert "scaled from [" in capsys.readouterr().err
    assert len(list((tmp_path / "w").iterdir())) == 3


def test_export_errors(store_path, tmp_path, capsys):
    export = tool_module("export")
    assert export.main([str(store_path), "--array", "nope", "--out", str(tmp_path)]) == 1
    assert "no chunked array 'nope'" in capsys.readouterr().err
    assert export.main([str(store_path), "--episode", "9", "--gif", str(tmp_path / "x.gif")]) == 1
    assert "does not exist" in capsys.readouterr().err
    odd = save_store(tmp_path / "odd.h5", np.zeros((3, 5, 6, 7, 8), np.uint8))
    assert export.main([str(odd), "--out", str(tmp_path)]) == 1
    assert "--layout" in capsys.readouterr().err


def test_bench_priority_device_runs_and_writes_its_table(tmp_path):
    """The GPU priority-index benchmark on a machine without one: the host index and the device
    index on the cpu, every step timed, a JSON and a Markdown table written."""
    out = tmp_path / "pd.json"
    res = run_tool("bench_priority_device", "--capacities", "5000", "--reps", "10", "--out", out)
    assert res.returncode == 0, res.stderr[-2000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["capacity"] == 5000
    assert all(row[f"{arm}_ms_{k}"] > 0 for arm in ("host", "torch_cpu") for k in (32, 256))
    assert "| capacity | host_ms_32 |" in out.with_suffix(".md").read_text()
