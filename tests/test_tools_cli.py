"""The tools on saved replay buffers and on damaged files, run as a user runs them.

* exit status 0 / 1 (corrupt) / 2 (unreadable), one line on stderr, never a traceback;
* ``verify.py`` says what it checked; ``inspect_store.py`` speaks in transitions and
  frames and can plot chunk sizes; ``export.py`` works on a buffer file with no flags,
  rebuilds observation stacks exactly, refuses ranges beyond what was written, warns
  about nothing and says so when Pillow is missing;
* the ``tools/`` scripts run the installed commands' code (``sb3_integration.cli``), which
  ``python -m sb3_integration.cli TOOL`` runs too.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from gymnasium import spaces

from chunkstore import hdf5
from sb3_integration import CompressedDictReplayBuffer, CompressedReplayBuffer

REPO = Path(__file__).resolve().parent.parent
TOOLS = REPO / "tools"
FIXTURES = REPO / "tests" / "fixtures" / "v1"


def tool_main(name: str, *args) -> int:
    """Run a tool's ``main`` in this process (no interpreter start-up: torch imports once)."""
    spec = importlib.util.spec_from_file_location(f"chunkstore_cli_{name}", TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main([str(a) for a in args])


def run_tool(name: str, *args, env: dict[str, str] | None = None, cwd: Path = REPO,
             warnings_are_errors: bool = False) -> subprocess.CompletedProcess:
    flags = ["-W", "error::DeprecationWarning"] if warnings_are_errors else []
    return subprocess.run([sys.executable, *flags, str(TOOLS / f"{name}.py"), *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=120,
                          env={**os.environ, **(env or {})})


def stacked_stream(n: int, shape: tuple[int, ...], axis: int, depth: int, rng) -> list[np.ndarray]:
    """Consecutive frame stacks along ``axis`` (zero padding after each reset every 9 steps)."""
    frame_shape = list(shape)
    frame_shape[axis] //= depth
    stacks, stack = [], np.zeros(shape, np.uint8)
    for t in range(n + 1):
        if t % 9 == 0:
            stack = np.zeros(shape, np.uint8)
        frame = rng.integers(1, 255, frame_shape, dtype=np.uint8)
        stack = np.concatenate([np.delete(stack, np.s_[:shape[axis] // depth], axis=axis), frame],
                               axis=axis)
        stacks.append(stack)
    return stacks


def make_buffer(path: Path, *, n_envs: int = 2, axis: int = 0, steps: int = 30, size: int = 40, **options):
    rng = np.random.default_rng(0)
    shape = (4, 12, 10) if axis == 0 else (12, 10, 4)
    buf = CompressedReplayBuffer(size * n_envs, spaces.Box(0, 255, shape, np.uint8), spaces.Discrete(3),
                                 device="cpu", n_envs=n_envs, chunk_len=4, compression_method="zstd1", **options)
    streams = [stacked_stream(steps, shape, axis, 4, rng) for _ in range(n_envs)]
    for t in range(steps):
        obs = np.stack([s[t] for s in streams])
        nxt = np.stack([s[t + 1] for s in streams])
        buf.add(obs, nxt, np.zeros((n_envs, 1)), np.zeros(n_envs, np.float32),
                np.array([(t + 1) % 9 == 0] * n_envs), [{}] * n_envs)
    buf.save(path)
    return buf


@pytest.fixture
def buffer_path(tmp_path) -> Path:
    make_buffer(tmp_path / "buf.h5")
    return tmp_path / "buf.h5"


# -- exit codes and one-line messages ------------------------------------------------------------
def damage(kind: str, src: Path, tmp_path: Path) -> Path:
    path = tmp_path / f"{kind}.h5"
    if kind == "missing":
        return path
    if kind == "directory":
        path.mkdir()
        return path
    if kind == "fifo":
        os.mkfifo(path)
        return path
    if kind == "garbage":
        path.write_bytes(os.urandom(4096))
        return path
    path.write_bytes(src.read_bytes())
    with h5py.File(path, "r+") as f:
        if kind == "header":  # one digit of pos
            f.attrs["attrs"] = f.attrs["attrs"].replace('"pos": 30', '"pos": 31')
            return path
        info = f["observations/frames"].id.get_chunk_info(0)
    with open(path, "r+b") as fh:  # kind == "chunk"
        fh.seek(info.byte_offset + info.size // 2)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0x40]))
    return path


@pytest.mark.parametrize("tool", ["verify", "inspect_store", "export"])
@pytest.mark.parametrize("kind, code", [("chunk", 1), ("header", 1), ("garbage", 2),
                                        ("directory", 2), ("fifo", 2), ("missing", 2)])
def test_exit_status_and_one_line_message(buffer_path, tmp_path, capsys, tool, kind, code):
    args = ["--out", tmp_path / "png"] if tool == "export" else []  # export reads item 0: chunk 0
    if tool == "inspect_store" and kind == "chunk":
        code = 0  # inspect reads metadata only: chunk bytes are verify's business
    if kind == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("needs FIFOs")
    path = damage(kind, buffer_path, tmp_path)
    if kind == "fifo":  # in a subprocess: a regression would block on the open
        out = run_tool(tool, path, *args)
        returncode, stderr = out.returncode, out.stderr
    else:  # in this process: any exception escaping main() fails the test
        returncode, stderr = tool_main(tool, path, *args), capsys.readouterr().err
    assert returncode == code, stderr
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    if code and (tool != "verify" or code == 2):
        assert len(lines) == 1, stderr
        assert ("corrupt" if code == 1 else "cannot read") in lines[0]


def test_verify_says_what_it_checked(tmp_path):
    buf = CompressedReplayBuffer.load(FIXTURES / "replay_default.h5", device="cpu")
    buf.save(tmp_path / "dict.h5")
    out = run_tool("verify", tmp_path / "dict.h5", "--no-progress")
    assert out.returncode == 0, out.stderr
    first, *rest = out.stdout.splitlines()
    assert first.startswith(f"OK {tmp_path / 'dict.h5'} (79 chunks, 18 checksums, ") and first.endswith(" s)")
    text = "\n".join(rest)
    assert "chunkstore format 3" in text and "observations/frames" in text
    assert "codec config and trained dictionary" in text and "header" in text
    assert "14 extra descriptions" in text
    old = run_tool("verify", FIXTURES / "replay_default.h5")
    assert old.returncode == 0 and "format 1 files have only chunk and extra CRC32s" in old.stdout


# -- the package's commands and the tools/ scripts --------------------------------------------------
@pytest.mark.parametrize("script, module", [("inspect_store", "inspect_store"), ("verify", "verify"),
                                            ("export", "export"), ("import_dqn_replay", "import_dqn")])
def test_the_tools_scripts_run_the_packages_main(script, module):
    import importlib

    spec = importlib.util.spec_from_file_location(f"chunkstore_cli_{script}", TOOLS / f"{script}.py")
    wrapper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wrapper)
    assert wrapper.main is importlib.import_module(f"sb3_integration.cli.{module}").main


def test_python_m_sb3_integration_cli(buffer_path, capsys):
    from sb3_integration.cli.__main__ import main

    assert main(["verify", "--no-progress", "-q", str(buffer_path)]) == 0
    assert capsys.readouterr().out.startswith(f"OK {buffer_path} (")
    assert main(["chunkstore-inspect", str(buffer_path)]) == 0  # the command's own name works too
    assert "replay buffer (CompressedReplayBuffer): 60 of 80 transitions live" in capsys.readouterr().out
    assert main(["--help"]) == 0
    assert capsys.readouterr().out.strip() == ("usage: python -m sb3_integration.cli "
                                               "{inspect,verify,export,import-dqn} [ARGS ...]")
    assert main([]) == 2 and "usage:" in capsys.readouterr().err
    assert main(["nope"]) == 2 and "unknown tool 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # argparse's --help names the command as it was run
        main(["export", "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: python -m sb3_integration.cli export ")
    out = subprocess.run([sys.executable, "-m", "sb3_integration.cli", "verify", "-q", "--no-progress",
                          str(buffer_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith(f"OK {buffer_path} ("), out.stderr


# -- inspect_store ---------------------------------------------------------------------------------
def test_inspect_speaks_in_transitions_and_frames(buffer_path):
    out = run_tool("inspect_store", buffer_path)
    assert out.returncode == 0, out.stderr
    assert "60 of 80 transitions live (buffer_size 40 x 2 envs)" in out.stdout
    assert "stacks of 4 on axis 0" in out.stdout and "B per transition" in out.stdout
    info = json.loads(run_tool("inspect_store", buffer_path, "--json").stdout)["buffer"]
    assert info["transitions_live"] == 60 and info["transitions_capacity"] == 80
    assert info["sb3_bytes_per_transition"] == 2 * 4 * 12 * 10
    assert 2 * 30 <= info["frames_stored"] <= info["frame_slots"]  # at least one new frame a step
    assert info["bytes_per_transition"] == pytest.approx(info["observation_bytes"] / 60)
    assert info["ratio_vs_sb3"] == pytest.approx(960 * 60 / info["observation_bytes"])


def test_inspect_plots_chunk_sizes(buffer_path, tmp_path):
    pytest.importorskip("matplotlib")
    out = run_tool("inspect_store", buffer_path, "--plot", tmp_path / "chunks.png")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "chunks.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def blocked(tmp_path: Path, module: str) -> dict[str, str]:
    """An environment in which ``import module`` fails, as when it is not installed."""
    stub = tmp_path / "blocked" / module
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text(f'raise ImportError("No module named {module!r}")\n')
    return {"PYTHONPATH": os.pathsep.join([str(stub.parent), os.environ.get("PYTHONPATH", "")])}


def test_inspect_plot_without_matplotlib_says_so(buffer_path, tmp_path):
    out = run_tool("inspect_store", buffer_path, "--plot", tmp_path / "c.png",
                   env=blocked(tmp_path, "matplotlib"))
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0
    assert "--plot needs matplotlib: pip install matplotlib" in out.stderr


# -- export ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, -1])
def test_export_with_no_flags_on_a_buffer_file(tmp_path, axis):
    from PIL import Image

    make_buffer(tmp_path / "buf.h5", axis=axis)
    out = run_tool("export", tmp_path / "buf.h5", cwd=tmp_path, warnings_are_errors=True)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["observations_frames_0000000.png"]
    img = Image.open(tmp_path / "observations_frames_0000000.png")
    assert (img.size, img.mode) == ((10, 12), "L")  # one gray frame of the stacks


@pytest.mark.parametrize("axis", [0, -1])
def test_export_obs_of_a_wrapped_buffer_equals_its_observations(tmp_path, axis):
    from PIL import Image

    make_buffer(tmp_path / "b.h5", axis=axis, steps=50)  # wrapped around: full
    buf = CompressedReplayBuffer.load(tmp_path / "b.h5", device="cpu")
    for which, view in (([], buf.observations), (["--next"], buf.next_observations)):
        assert tool_main("export", tmp_path / "b.h5", "--obs", *which, "--env", 1, "--start", 0,
                         "--stop", 40, "--out", tmp_path / f"png{len(which)}") == 0
        name = "next_observations" if which else "observations"
        for row in (0, 9, 39):
            img = np.asarray(Image.open(tmp_path / f"png{len(which)}" / f"{name}_{row:07d}.png"))
            frames = list(view[row, 1]) if axis == 0 else list(np.moveaxis(view[row, 1], -1, 0))
            assert np.array_equal(img, np.concatenate(frames, axis=1))


def test_export_obs_of_a_dict_buffer(tmp_path, capsys):
    from PIL import Image

    space = spaces.Dict({"img": spaces.Box(0, 255, (4, 6, 6), np.uint8),
                         "vec": spaces.Box(-1, 1, (3,), np.float32)})
    buf = CompressedDictReplayBuffer(20, space, spaces.Discrete(2), device="cpu", chunk_len=4)
    rng = np.random.default_rng(3)
    stream = stacked_stream(12, (4, 6, 6), 0, 4, rng)
    for t in range(12):
        vec = rng.uniform(-1, 1, (1, 3)).astype(np.float32)
        buf.add({"img": stream[t][None], "vec": vec}, {"img": stream[t + 1][None], "vec": vec},
                np.zeros((1, 1)), np.zeros(1, np.float32), np.zeros(1), [{}])
    buf.save(tmp_path / "d.h5")
    assert tool_main("export", tmp_path / "d.h5", "--obs", "--next", "--key", "img", "--start", 5,
                     "--out", tmp_path) == 0
    img = np.asarray(Image.open(tmp_path / "next_observations_img_0000005.png"))
    assert np.array_equal(img, np.concatenate(list(buf.next_observations["img"][5, 0]), axis=1))
    assert tool_main("export", tmp_path / "d.h5", "--obs", "--key", "nope", "--out", tmp_path) == 1
    assert "no observation key 'nope'" in capsys.readouterr().err


def test_export_obs_writes_the_rebuilt_observation(buffer_path, tmp_path):
    from PIL import Image

    buf = CompressedReplayBuffer.load(buffer_path, device="cpu")
    out = run_tool("export", buffer_path, "--obs", "--env", 1, "--start", 11, "--stop", 13,
                   "--out", tmp_path, warnings_are_errors=True)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    img = np.asarray(Image.open(tmp_path / "observations_0000012.png"))
    assert np.array_equal(img, np.concatenate(list(buf.observations[12, 1]), axis=1))


def test_export_refuses_frames_never_written(buffer_path, tmp_path):
    with hdf5.load(buffer_path, cache=0) as store:
        frames = store.arrays["observations/frames"]
        stored = set(frames.stored_chunks().tolist())
        capacity = frames.capacity
    unwritten = next(c for c in range(frames.nchunks_total) if c not in stored) * frames.chunk_len
    for args, message in [
        (["--start", unwritten, "--stop", unwritten + 1], f"item {unwritten} was never written"),
        (["--start", 0, "--stop", 10**6], f"range [0, 1000000) is outside the {capacity} items there are"),
    ]:
        out = run_tool("export", buffer_path, *args, "--out", tmp_path / "png")
        assert out.returncode == 1 and message in out.stderr, out.stderr
        assert out.stderr.count("\n") == 1 and not list((tmp_path / "png").glob("*.png"))


@pytest.mark.parametrize("args, message", [
    (["--obs", "--start", 30, "--stop", 35], "transition 30 was never written: the buffer holds transitions 0..29"),
    (["--obs", "--start", 38, "--stop", 45], "outside the 40 items"),
    (["--episode", 1], "--episode counts transitions of a replay buffer: add --obs"),
    (["--obs", "--env", 2], "--env 2: the buffer has 2 env(s)"),
])
def test_export_refuses_ranges_beyond_what_was_written(buffer_path, tmp_path, args, message):
    out = run_tool("export", buffer_path, *args, "--out", tmp_path / "png")
    assert out.returncode == 1 and message in out.stderr, out.stderr
    assert out.stderr.count("\n") == 1 and not list((tmp_path / "png").glob("*.png"))


@pytest.mark.parametrize("small_arrays", ["raw", "compressed"])
def test_export_finds_a_buffers_episodes_wherever_its_dones_are(tmp_path, small_arrays):
    """A buffer of 1M transitions or more keeps its dones in the chunked ``transitions`` array
    (``small_arrays="auto"``), not in an extra: ``--obs --episode`` reads them there too."""
    path = tmp_path / "buf.h5"
    buf = make_buffer(path, small_arrays=small_arrays)
    with hdf5.load(path) as store:
        assert ("transitions" in store.arrays) == (small_arrays == "compressed")
    gif = tmp_path / "e1.gif"
    out = run_tool("export", path, "--obs", "--env", 1, "--episode", 1, "--gif", gif)
    assert out.returncode == 0, out.stderr
    from PIL import Image
    with Image.open(gif) as g:
        assert g.n_frames == 9  # dones after steps 8, 17 and 26: episode 1 is transitions 9..17
        g.seek(0)
        first = np.asarray(g.convert("L"))
    assert np.array_equal(first, buf.observations[9, 1][-1])  # a GIF draws each stack's newest frame


def test_export_without_pillow_says_so(buffer_path, tmp_path):
    out = run_tool("export", buffer_path, "--out", tmp_path, env=blocked(tmp_path, "PIL"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == ("export: writing images needs Pillow: pip install pillow "
                                  "(or pip install 'chunkstore-rl[tools]')")
