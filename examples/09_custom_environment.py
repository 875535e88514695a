"""An environment as a class, with its own metrics.

Any object with `num_agents`, `reset(item) -> EnvState` and `step_batch(states, responses) -> [Transition]`
is an environment. `step_batch` gets every joint action of a turn at once (score them in parallel if the
reward is expensive); a `Transition`'s `metrics` are logged as `env/<name>` (docs: Understanding the logs).
"""
import comarl


class RhymeTask:
    """Two agents each write a line; the team scores when the lines end alike (and a half for the topic)."""

    num_agents = 2

    def reset(self, item):
        return comarl.EnvState(item=item, prompts=(f"Write a line about {item['topic']}.",
                                                   f"Write a line about {item['topic']} that rhymes."))

    def step_batch(self, states, responses):
        out = []
        for state, (a, b) in zip(states, responses):
            ends = [r.strip()[-2:].lower() for r in (a, b)]
            rhyme = float(bool(ends[0]) and ends[0] == ends[1])
            on_topic = float(state.item["topic"] in f"{a} {b}".lower())
            out.append(comarl.Transition(reward=rhyme + 0.5 * on_topic, done=True,
                                         metrics={"rhyme": rhyme, "on_topic": on_topic}))
        return out


agents = [comarl.AgentConfig(model="tiny", max_new_tokens=6) for _ in range(2)]
config = comarl.TrainConfig(algorithm="magrpo", rollout=comarl.RolloutConfig(num_generations=2),
                            run=comarl.RunConfig(batch_size=2, max_steps=2, progress_bar=False, report_to=[]))

history = comarl.Trainer(agents, RhymeTask(), [{"topic": "rain"}, {"topic": "night"}], config).train()
print(f"env/rhyme {history[-1]['env/rhyme']:.3f}, env/on_topic {history[-1]['env/on_topic']:.3f}")
