"""A team in stages: a planner, then a coder that reads the plan.

`stages=[[0], [1]]` runs agent 0 first; each of its K plans branches into K programs of agent 1, which sees
the plan through its stage formatter. The tree credits each plan with the mean return of the programs that
followed it (docs: Teams in stages). Names make the logs read `planner/...` and `coder/...`.
"""
import comarl


def reward(responses, item):
    plan, code = responses
    return float(item["word"] in code) + 0.1 * float(item["word"] in plan)


env = comarl.FunctionEnv(
    formatters=[lambda it: f"Plan how to write the word {it['word']!r}.", lambda it: "Write the word."],
    reward_fn=reward,
    stages=[[0], [1]],  # planner, then coder
    stage_formatters={1: lambda state, inputs: f"Write the word the plan names.\nPlan: {inputs[0]}"})
agents = [comarl.AgentConfig(model="tiny", max_new_tokens=4, name=name) for name in ("planner", "coder")]
config = comarl.TrainConfig(algorithm="magrpo", rollout=comarl.RolloutConfig(num_generations=2),
                            run=comarl.RunConfig(batch_size=2, max_steps=2, progress_bar=False, report_to=[]))

history = comarl.Trainer(agents, env, [{"word": "red"}, {"word": "blue"}], config).train()
row = history[-1]
print(f"leaves {row['tree/leaves']:.0f} (2 items x 2 plans x 2 programs), "
      f"planner stage spread {row['stage0/spread']:.3f}, coder loss {row['coder/loss']:+.4f}")
