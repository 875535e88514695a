"""Extension without editing comarl: ``train.algorithm``, ``train.estimator`` and ``env.name`` load a user's
object from ``package.module:NAME``; unknown names say which key, what is known and the closest name."""
import sys
import textwrap
from types import SimpleNamespace

import pytest
import torch

import comarl
from comarl.algorithms.base import ESTIMATORS, Algorithm, get_algorithm
from comarl.config import load_config
from comarl.core.config_io import ConfigError
from comarl.core.registry import Registry
from comarl.envs.registry import EnvEntry, get_env

USER_MODULE = textwrap.dedent('''
    """A user's extensions, kept outside comarl."""
    from comarl.algorithms.base import Algorithm, Estimator, optionally_scaled
    from comarl.envs.base import FunctionEnv
    from comarl.envs.registry import EnvEntry


    def median_baseline(view):
        """R - median_k R per group."""
        return view.returns - view.returns.median(dim=1, keepdim=True).values


    MEDIAN = Estimator("median", optionally_scaled(median_baseline), min_generations=3)
    MEDIAN_PG = Algorithm.with_estimator("median_pg", MEDIAN)
    NOT_A_RECORD = 42


    def build(num_agents, **args):
        return FunctionEnv([lambda it: it["q"]] * num_agents, lambda resps, it: float(len(resps[0])))


    ENTRY = EnvEntry(build, lambda source, split, limit: [{"q": "a"}, {"q": "b"}], "two prompts")
''')

R = torch.tensor([[1.0, 2.0, 6.0], [0.0, 4.0, 4.0]])  # medians 2 and 4


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    name = f"user_ext_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def _view(returns=R):
    return SimpleNamespace(returns=returns, baseline=None)


def test_an_algorithm_record_loads_from_its_import_path(user_module):
    alg = get_algorithm(f"{user_module}:MEDIAN_PG")
    assert isinstance(alg, Algorithm) and alg.name == "median_pg" and alg.min_generations == 3
    assert torch.equal(alg.advantage(_view(), SimpleNamespace(scale_advantages=False)),
                       torch.tensor([[-1.0, 0.0, 4.0], [-4.0, 0.0, 0.0]]))


def test_an_estimator_replaces_the_algorithms_own(user_module):
    cfg = comarl.TrainConfig(algorithm="magrpo", estimator=f"{user_module}:MEDIAN")
    step = get_algorithm("magrpo").step_algorithm(cfg)
    assert step.name == "magrpo" and step.min_generations == 3
    assert torch.equal(step.advantage(_view(), cfg.loss), torch.tensor([[-1.0, 0.0, 4.0], [-4.0, 0.0, 0.0]]))
    # a plain function is an estimator too, scaled by train.loss.scale_advantages like the built-in ones
    cfg = comarl.TrainConfig(estimator=f"{user_module}:median_baseline",
                             loss=comarl.LossConfig(scale_advantages=True))
    adv = get_algorithm("magrpo").step_algorithm(cfg).advantage(_view(), cfg.loss)
    assert torch.allclose(adv[0], torch.tensor([-1.0, 0.0, 4.0]) / R[0].std())


def test_a_users_algorithm_trains(user_module):
    cfg = comarl.TrainConfig(algorithm=f"{user_module}:MEDIAN_PG", rollout=comarl.RolloutConfig(num_generations=3),
                             run=comarl.RunConfig(batch_size=2, max_steps=1, progress_bar=False, report_to=[],
                                                  log_samples_steps=0))
    agent = comarl.AgentConfig(model="tiny", max_new_tokens=6, lr=1e-2)
    entry = get_env(f"{user_module}:ENTRY")
    t = comarl.Trainer([agent], entry.build(1), entry.load_items(None, None, None), cfg)
    before = [p.detach().clone() for p in t.agents[0].model.parameters()]
    t.train()
    assert t.algorithm.name == "median_pg"
    assert any(not torch.equal(b, p) for b, p in zip(before, t.agents[0].model.parameters()))


def test_built_in_estimators_by_name():
    cfg = comarl.TrainConfig(algorithm="magrpo", estimator="leave_one_out")
    adv = get_algorithm("magrpo").step_algorithm(cfg).advantage(_view(), cfg.loss)
    assert torch.allclose(adv[0], torch.tensor([1 - 4.0, 2 - 3.5, 6 - 1.5]))
    greedy = get_algorithm("mareinforce").step_algorithm(comarl.TrainConfig(estimator="greedy"))
    assert greedy.greedy_baseline and greedy.min_generations == 1
    assert set(ESTIMATORS.names()) >= {"group_relative", "leave_one_out", "no_baseline", "greedy", "group_max",
                                       "token_group"}


@pytest.mark.parametrize("algorithm, says", [("iac", "a critic"), ("madpo", "its own update")])
def test_an_estimator_is_refused_where_no_estimator_runs(algorithm, says):
    with pytest.raises(ConfigError, match=f"train.estimator: {algorithm} takes no estimator.*{says}"):
        get_algorithm(algorithm).step_algorithm(comarl.TrainConfig(algorithm=algorithm, estimator="greedy"))


def test_a_config_file_names_a_users_algorithm_and_estimator(user_module, tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(f"agents: [{{model: tiny}}]\nenv: {{name: {user_module}:ENTRY}}\n"
                    f"train: {{algorithm: {user_module}:MEDIAN_PG, rollout: {{num_generations: 3}}}}\n")
    cfg = load_config(path)
    assert cfg.train.algorithm == f"{user_module}:MEDIAN_PG"
    path.write_text(f"agents: [{{model: tiny}}]\nenv: {{name: {user_module}:ENTRY}}\n"
                    f"train: {{estimator: {user_module}:MEDIAN, rollout: {{num_generations: 2}}}}\n")
    with pytest.raises(ConfigError, match="num_generations"):  # the user's estimator asks K >= 3
        load_config(path)


def test_an_environment_entry_or_build_function_loads_from_its_import_path(user_module):
    entry = get_env(f"{user_module}:ENTRY")
    assert entry.description == "two prompts" and entry.load_items(None, None, None) == [{"q": "a"}, {"q": "b"}]
    plain = get_env(f"{user_module}:build")
    assert isinstance(plain, EnvEntry) and plain.build(2).num_agents == 2


@pytest.mark.parametrize("lookup, spec, says", [
    (get_algorithm, "magrop", r"train.algorithm: unknown algorithm 'magrop'; did you mean 'magrpo'\?"),
    (get_env, "tdlr", r"env.name: unknown environment 'tdlr'; did you mean 'tldr'\?"),
    (ESTIMATORS.get, "leave_one", r"train.estimator: unknown estimator 'leave_one'; did you mean 'leave_one_out'"),
    (get_algorithm, "no_such_module_xyz:R", r"train.algorithm: cannot import 'no_such_module_xyz:R' "
                                            r"\(ModuleNotFoundError"),
])
def test_unknown_names_say_the_key_and_the_closest_name(lookup, spec, says):
    with pytest.raises(ConfigError, match=says):
        lookup(spec)


def test_an_imported_object_of_the_wrong_kind_is_named(user_module):
    with pytest.raises(ConfigError, match=f"train.algorithm: '{user_module}:NOT_A_RECORD' is of type int, "
                                          "not Algorithm"):
        get_algorithm(f"{user_module}:NOT_A_RECORD")
    with pytest.raises(ConfigError, match="neither an Estimator nor a function"):
        ESTIMATORS.get(f"{user_module}:NOT_A_RECORD")
    with pytest.raises(ConfigError, match="neither an EnvEntry nor a build"):
        get_env(f"{user_module}:NOT_A_RECORD")


def test_a_registry_imports_a_builtin_module_once_on_first_use(tmp_path, monkeypatch):
    (tmp_path / "builtin_mod_xyz.py").write_text("from test_registries_target import REG\nREG.register('a', 1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("thing", "x.thing", {"a": "builtin_mod_xyz"}, kind=int)
    sys.modules["test_registries_target"] = SimpleNamespace(REG=reg)  # type: ignore[assignment]
    try:
        assert reg.get("a") == 1 and "builtin_mod_xyz" in sys.modules
    finally:
        sys.modules.pop("test_registries_target", None)
        sys.modules.pop("builtin_mod_xyz", None)
