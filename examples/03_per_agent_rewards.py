"""A reward for each agent instead of one for the team.

Return `comarl.AgentRewards` from the reward function and agent i is trained on `values[i]`; a plain float
is shared by every agent. Here each agent is rewarded for its own part (a word count near a target) plus a
shared bonus when both parts are present.
"""
import comarl


def reward(responses, item):
    own = [1.0 - min(abs(len(r.split()) - target), 4) / 4 for r, target in zip(responses, item["targets"])]
    bonus = 0.5 if all(r.strip() for r in responses) else 0.0
    return comarl.AgentRewards(tuple(x + bonus for x in own))


env = comarl.FunctionEnv(
    formatters=[lambda it: f"Name {it['targets'][0]} colours.", lambda it: f"Name {it['targets'][1]} animals."],
    reward_fn=reward)
items = [{"targets": [2, 4]}, {"targets": [3, 1]}]
agents = [comarl.AgentConfig(model="tiny", max_new_tokens=8) for _ in range(2)]
config = comarl.TrainConfig(algorithm="magrpo", rollout=comarl.RolloutConfig(num_generations=4),
                            run=comarl.RunConfig(batch_size=2, max_steps=2, progress_bar=False, report_to=[]))

history = comarl.Trainer(agents, env, items, config).train()
print(f"mean reward {history[-1]['reward/mean']:.3f}; "
      f"|advantage| agent0 {history[-1]['agent0/advantage_abs']:.3f}, agent1 {history[-1]['agent1/advantage_abs']:.3f}")
