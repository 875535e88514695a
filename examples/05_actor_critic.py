"""Actor-critic: IAC with a value head on each agent.

`algorithm="iac"` gives each agent its own critic; `critic.model=None` puts it as a value head on the agent's
own backbone (no second model), and GAE over the rollout tree turns the values into advantages. `"maac"`
would train one central critic that sees every agent's prompt (docs: Actor-critic).
"""
import comarl
from comarl.critics import CriticSettings


def reward(responses, item):
    return sum(item["word"] in r for r in responses) / len(responses)


env = comarl.FunctionEnv(formatters=[lambda it: f"Say {it['word']}.", lambda it: f"Repeat {it['word']}."],
                         reward_fn=reward)
agents = [comarl.AgentConfig(model="tiny", max_new_tokens=6, lr=1e-4) for _ in range(2)]
config = comarl.TrainConfig(algorithm="iac", rollout=comarl.RolloutConfig(num_generations=2),
                            run=comarl.RunConfig(batch_size=2, max_steps=2, progress_bar=False, report_to=[]),
                            critic=CriticSettings(model=None, lr=1e-4, gae_lambda=0.95))

history = comarl.Trainer(agents, env, [{"word": "yes"}, {"word": "no"}], config).train()
row = history[-1]
print(f"value loss {row['agent0/value_loss']:.5f}, value mean {row['agent0/value_mean']:+.4f}, "
      f"explained variance {row['agent0/explained_var']}")
