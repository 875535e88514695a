"""Agents that revise after reading each other.

A `transition_fn` makes the task multi-turn: after each turn it gets the state (each agent's prompts and its
history) and the joint response, and returns the next prompts (or None to end the branch). Every joint action
of turn 1 branches into its own turn 2, and each turn's reward is credited back through the tree, so the
first answers are trained for the revisions they lead to.
"""
import comarl


def reward(responses, item):
    text = " ".join(responses).lower()
    return sum(word in text for word in item["keywords"]) / len(item["keywords"])


def revise(state, responses):  # turn 2: each agent reads the other's answer
    return [f"{prompt}\nYour teammate wrote: {responses[1 - i]}\nImprove your part."
            for i, prompt in enumerate(state.prompts)]


env = comarl.FunctionEnv(
    formatters=[lambda it: f"Describe the place in a story about {it['topic']}.",
                lambda it: f"Describe the hero of a story about {it['topic']}."],
    reward_fn=reward, transition_fn=revise, max_turns=2)
items = [{"topic": "a lighthouse", "keywords": ["sea", "light", "keeper"]},
         {"topic": "a bakery", "keywords": ["bread", "oven", "morning"]}]
agents = [comarl.AgentConfig(model="tiny", max_new_tokens=8) for _ in range(2)]
config = comarl.TrainConfig(algorithm="magrpo", rollout=comarl.RolloutConfig(num_generations=2, num_turns=2),
                            run=comarl.RunConfig(batch_size=2, max_steps=2, progress_bar=False, report_to=[]))

history = comarl.Trainer(agents, env, items, config).train()
last = history[-1]
print(f"turn 1 reward {last['reward/turn0']:.3f}, turn 2 reward {last['reward/turn1']:.3f}, "
      f"return {last['return/mean']:.3f}, tree nodes {last['tree/nodes']:.0f}")
