"""Two agents, one team reward.

The smallest team: agent 1 writes a short answer, agent 2 a longer one, and one reward scores the pair.
`FunctionEnv` builds the environment from a prompt formatter per agent and a reward function; MAGRPO trains
both agents on it. The models are tiny random ones built on the fly, so this runs anywhere in seconds (and
learns nothing useful: put hub ids there for real training).
"""
import comarl


def reward(responses, item):  # one float for the whole team
    short, long = (len(r.split()) for r in responses)
    return 1.0 if short and 2 <= long / short <= 3 else 0.0


env = comarl.FunctionEnv(
    formatters=[lambda it: f"Summarise briefly: {it['text']}",
                lambda it: f"Summarise in detail: {it['text']}"],
    reward_fn=reward)
items = [{"text": "The bus was late again so I walked to work."},
         {"text": "Our cat learned to open doors."}]
agents = [comarl.AgentConfig(model="tiny", max_new_tokens=8),
          comarl.AgentConfig(model="tiny", max_new_tokens=16, temperature=0.9)]
config = comarl.TrainConfig(algorithm="magrpo", rollout=comarl.RolloutConfig(num_generations=4),
                            run=comarl.RunConfig(batch_size=2, max_steps=3, progress_bar=False, report_to=[]))

history = comarl.Trainer(agents, env, items, config).train()
for step, row in enumerate(history, 1):
    print(f"step {step}: reward {row['reward/mean']:.3f}, agent0 loss {row['agent0/loss']:+.4f}")
