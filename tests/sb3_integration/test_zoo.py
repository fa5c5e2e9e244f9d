"""rl-zoo3: the plugin makes the buffer names evaluable in hyperparameter strings; the recipe trains."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import sb3_integration

ROOT = Path(__file__).resolve().parents[2]


def test_plugin_adds_the_names_to_rl_zoo3s_eval_namespace():
    em = pytest.importorskip("rl_zoo3.exp_manager")
    import sb3_integration.zoo as zoo

    namespace = vars(em)
    for name in zoo.NAMES:
        assert eval(name, namespace) is getattr(sb3_integration, name)  # what rl-zoo3 does with the YAML string
    kwargs = eval("dict(compression_method='zstd3+dict', chunk_len=16)", namespace)
    assert kwargs == {"compression_method": "zstd3+dict", "chunk_len": 16}
    zoo.register()  # idempotent


def test_plugin_refuses_to_shadow_a_different_name():
    pytest.importorskip("rl_zoo3")
    import sb3_integration.zoo as zoo

    other = types.SimpleNamespace(__name__="elsewhere", CompressedReplayBuffer=object())
    with pytest.raises(ValueError, match="already"):
        zoo.register(other)


def test_without_the_plugin_the_import_form_works():
    em = pytest.importorskip("rl_zoo3.exp_manager")
    cls = eval("__import__('sb3_integration').CompressedReplayBuffer", {"__builtins__": __builtins__, **{
        k: v for k, v in vars(em).items() if k not in sb3_integration.__all__}})
    assert cls is sb3_integration.CompressedReplayBuffer


def test_plugin_adds_the_prioritized_algorithms_to_rl_zoo3s_algos():
    utils = pytest.importorskip("rl_zoo3.utils")
    import sb3_integration.zoo as zoo

    assert utils.ALGOS["per_dqn"] is sb3_integration.PrioritizedDQN
    assert utils.ALGOS["per_qrdqn"] is sb3_integration.PrioritizedQRDQN
    assert utils.ALGOS["dqn"].__name__ == "DQN"  # rl-zoo3's own untouched
    zoo.register()  # idempotent
    em = pytest.importorskip("rl_zoo3.exp_manager")
    assert em.ALGOS is utils.ALGOS  # the dict rl-zoo3's ExperimentManager builds models from
    assert em.HYPERPARAMS_SAMPLER["per_dqn"] is em.HYPERPARAMS_SAMPLER["dqn"]
    assert em.HYPERPARAMS_SAMPLER["per_qrdqn"] is em.HYPERPARAMS_SAMPLER["qrdqn"]
    assert em.HYPERPARAMS_CONVERTER["per_qrdqn"] is em.HYPERPARAMS_CONVERTER["qrdqn"]
    with pytest.raises(ValueError, match="per_dqn"):
        zoo.register(types.SimpleNamespace(__name__="elsewhere"), algos={"per_dqn": object()})


def test_main_wants_train_or_enjoy():
    pytest.importorskip("rl_zoo3")
    import sb3_integration.zoo as zoo

    for argv in ([], ["fit", "--algo", "per_dqn"]):
        with pytest.raises(SystemExit, match="usage"):
            zoo.main(argv)


def zoo_train(tmp_path, *args, module="rl_zoo3.train", env_id="PongNoFrameskip-v4"):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    head = ["-m", "rl_zoo3.train"] if module == "rl_zoo3.train" else ["-m", module, "train"]
    cmd = [sys.executable, *head, "--env", env_id, "--seed", "0", "--num-threads", "1",
           "--eval-freq", "-1", "--vec-env", "dummy", "-f", str(tmp_path), *args]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_recipe_dqn_yaml_with_plugin_and_command_line_override(tmp_path):
    pytest.importorskip("rl_zoo3")
    from stable_baselines3 import DQN
    from stable_baselines3.common.save_util import load_from_pkl

    # the recipe of docs/rl-zoo3.md, shortened; -params overrides a buffer kwarg from the command line
    zoo_train(tmp_path, "--algo", "dqn", "--gym-packages", "sb3_integration.zoo", "-conf", "examples/rl_zoo3_dqn.yml",
              "-n", "800", "-params", "learning_starts:400", "buffer_size:5000",
              "replay_buffer_kwargs:dict(compression_method='lz4-block',chunk_len=8)", "--save-replay-buffer")
    run = tmp_path / "dqn" / "PongNoFrameskip-v4_1"
    buf = load_from_pkl(run / "replay_buffer.pkl")
    assert type(buf) is sb3_integration.CompressedReplayBuffer
    assert (buf.compression_method, buf.chunk_len, buf.size()) == ("lz4-block/0", 8, 800)
    model = DQN.load(run / "PongNoFrameskip-v4.zip", device="cpu")
    assert model.replay_buffer_class is sb3_integration.CompressedReplayBuffer


@pytest.mark.slow
def test_command_line_only_with_rl_zoo3s_own_hyperparameters(tmp_path):
    pytest.importorskip("rl_zoo3")
    from stable_baselines3.common.save_util import load_from_pkl

    zoo_train(tmp_path, "--algo", "dqn", "--gym-packages", "sb3_integration.zoo", "-n", "300",
              "-params", "replay_buffer_class:'CompressedReplayBuffer'", "replay_buffer_kwargs:dict(chunk_len=8)",
              "learning_starts:1000", "buffer_size:1000", "--save-replay-buffer")
    buf = load_from_pkl(tmp_path / "dqn" / "PongNoFrameskip-v4_1" / "replay_buffer.pkl")
    assert type(buf) is sb3_integration.CompressedReplayBuffer and (buf.chunk_len, buf.size()) == (8, 300)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["per_dqn", "per_qrdqn"])
def test_prioritized_algorithms_train_through_the_plugin_module(tmp_path, algo):
    pytest.importorskip("rl_zoo3")
    from stable_baselines3.common.save_util import load_from_pkl

    zoo_train(tmp_path, "--algo", algo, "-conf", "examples/rl_zoo3_per_dqn.yml", "-n", "1500",
              "-params", "learning_starts:500", "train_freq:100", "gradient_steps:10", "--save-replay-buffer",
              module="sb3_integration.zoo", env_id="CartPole-v1")
    run = tmp_path / algo / "CartPole-v1_1"
    buf = load_from_pkl(run / "replay_buffer.pkl")
    assert type(buf) is sb3_integration.CompressedPrioritizedReplayBuffer and buf.size() == 1500
    assert len(np.unique(buf.priorities()[:1500])) > 50  # the learner fed |TD| back
    assert buf.beta > 0.4  # and annealed beta
    cls = sb3_integration.PrioritizedDQN if algo == "per_dqn" else sb3_integration.PrioritizedQRDQN
    model = cls.load(run / "CartPole-v1.zip", device="cpu")
    assert type(model) is cls and model.replay_buffer_class is sb3_integration.CompressedPrioritizedReplayBuffer
