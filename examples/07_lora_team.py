"""LoRA agents on one shared base.

Agents with `lora=LoraSettings(...)` on the same base model share one frozen copy of it; each trains only its
own adapter, and the rollout generates for all of them in one batched call (docs: LoRA agents on one base).
Needs the `lora` extra (peft).
"""
import comarl
from comarl import LoraSettings


def reward(responses, item):
    return float(all(item["word"] in r for r in responses))


env = comarl.FunctionEnv(formatters=[lambda it: f"Write {it['word']}.", lambda it: f"Echo {it['word']}."],
                         reward_fn=reward)
agents = [comarl.AgentConfig(model="tiny", max_new_tokens=6, lr=1e-3, lora=LoraSettings(r=4, alpha=8))
          for _ in range(2)]
config = comarl.TrainConfig(algorithm="magrpo", rollout=comarl.RolloutConfig(num_generations=2),
                            run=comarl.RunConfig(batch_size=2, max_steps=2, progress_bar=False, report_to=[]))

trainer = comarl.Trainer(agents, env, [{"word": "sun"}, {"word": "moon"}], config)
trainer.train()
base = trainer.agents[0].model.shared.base  # the one frozen base model both adapters sit on
assert trainer.agents[1].model.shared.base is base
frozen = sum(p.numel() for n, p in base.named_parameters() if "lora_" not in n)
print(f"one base of {frozen} frozen parameters, shared by both agents")
for agent in trainer.agents:  # an agent's own parameters are its adapter's
    print(f"{agent.name}: {sum(p.numel() for p in agent.model.parameters())} adapter parameters trained")
