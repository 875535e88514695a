"""Train the agents inside your own LangGraph program.

A writer drafts a one-sentence summary, a critic reviews it, the writer revises: a LangGraph graph whose nodes
call the agents through the `openai` client the trainer hands the program. comarl runs the program K times per
post at once, captures every call token by token (the writer is called twice per run, the critic once), and
trains both agents with MAGRPO on the run's reward (docs: Train your own multi-agent program).
"""
from typing import TypedDict

from langgraph.graph import END, START, StateGraph

import comarl
from comarl.config import RolloutConfig, RunConfig


class Draft(TypedDict):
    post: str
    draft: str
    review: str
    rounds: int


def ask(client, agent, prompt):
    reply = client.chat.completions.create(model=agent, messages=[{"role": "user", "content": prompt}])
    return reply.choices[0].message.content


def program(item, client):
    def write(state):
        prompt = f"Summarise in one sentence:\n{state['post']}"
        if state["review"]:
            prompt += f"\nYour draft: {state['draft']}\nA reviewer said: {state['review']}\nRevise it:"
        return {"draft": ask(client, "writer", prompt), "rounds": state["rounds"] + 1}

    def review(state):
        return {"review": ask(client, "critic", f"Post: {state['post']}\nSummary: {state['draft']}\nOne tip:")}

    graph = StateGraph(Draft)
    graph.add_node("write", write)
    graph.add_node("review", review)
    graph.add_edge(START, "write")
    graph.add_conditional_edges("write", lambda s: END if s["rounds"] >= 2 else "review", ["review", END])
    graph.add_edge("review", "write")
    final = graph.compile().invoke({"post": item["text"], "draft": "", "review": "", "rounds": 0})
    words = final["draft"].split()
    overlap = len({w.lower() for w in words} & {w.lower() for w in item["text"].split()})
    return (3 <= len(words) <= 15) + 0.1 * overlap  # short, and about the post


posts = [{"text": "The bus was late again so I walked to work and found a bakery."},
         {"text": "Our cat learned to open doors and now visits the neighbours."}]
agents = [comarl.AgentConfig(model="tiny", name="writer", max_new_tokens=12),
          comarl.AgentConfig(model="tiny", name="critic", max_new_tokens=8)]
config = comarl.TrainConfig(algorithm="magrpo", rollout=RolloutConfig(num_generations=4),
                            run=RunConfig(batch_size=2, max_steps=2, progress_bar=False, report_to=[]))

with comarl.ProgramEnv(program, num_agents=2) as env:
    history = comarl.Trainer(agents, env, posts, config).train()
for step, row in enumerate(history, 1):
    print(f"step {step}: reward {row['reward/mean']:.3f}, writer calls per run {row['program/calls/writer']:.0f}, "
          f"critic loss {row['critic/loss']:+.4f}")
