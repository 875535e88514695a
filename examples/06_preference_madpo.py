"""Preference learning: MADPO from the team's own samples.

Online MADPO samples K joint answers per item, makes (better, worse) pairs from their rewards, and takes a
joint DPO step: one preference over the whole team's answer, the agents' log-ratios summed. With
`joint_mode="cross"` every combination of the agents' samples is scored, which gives more pairs.
"""
import comarl


def reward(responses, item):
    return float(len(" ".join(responses).split()) >= item["min_words"])


env = comarl.FunctionEnv(formatters=[lambda it: "Greet the reader.", lambda it: "Say goodbye to the reader."],
                         reward_fn=reward)
agents = [comarl.AgentConfig(model="tiny", max_new_tokens=8, temperature=1.0) for _ in range(2)]
config = comarl.TrainConfig(algorithm="madpo", rollout=comarl.RolloutConfig(num_generations=3, joint_mode="cross"),
                            run=comarl.RunConfig(batch_size=2, max_steps=2, progress_bar=False, report_to=[]))

history = comarl.Trainer(agents, env, [{"min_words": 6}, {"min_words": 10}], config).train()
for step, row in enumerate(history, 1):
    pairs = int(row["pref/pairs"])
    loss = f"{row['pref/loss']:.4f}" if "pref/loss" in row else "- (no pair: every answer scored the same)"
    print(f"step {step}: {pairs} pairs, DPO loss {loss}")
