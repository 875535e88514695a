import torch

from comarl.models.agents import build_agents
from comarl.generation import cut_at_eos, generate
from comarl.objective.logprobs import collate, completion_logprobs


def test_cut_at_first_eos_with_pad_equal_eos():
    eos = 0
    gen = torch.tensor([[5, 6, 0, 0, 0],    # EOS at 2, padding (=EOS id) after
                        [5, 0, 7, 0, 0],    # first EOS wins
                        [5, 6, 7, 8, 9]])   # no EOS: truncated
    ids, trunc = cut_at_eos(gen, [eos])
    assert ids == [[5, 6, 0], [5, 0], [5, 6, 7, 8, 9]]
    assert trunc == [False, False, True]


def test_collate_masks_prompt_and_completion():
    ids, attn, pos, cmask = collate([[1, 2, 3], [4]], [[7, 0], [8]], pad_id=0)
    assert ids.tolist() == [[1, 2, 3, 7, 0], [0, 0, 4, 8, 0]]
    assert attn.tolist() == [[1, 1, 1, 1, 1], [0, 0, 1, 1, 0]]
    assert pos[1, 2:4].tolist() == [0, 1]
    assert cmask.tolist() == [[1, 1], [1, 0]]  # the EOS (id 0 = pad) of row 0 counts


def test_eos_inside_prompt_is_not_cut_and_logprobs_match_unbatched():
    agent, = build_agents(["tiny"])
    tok = agent.tokenizer
    assert tok.pad_token_id == tok.eos_token_id
    p_ids = agent.encode_prompts(["short", "a much longer prompt with several words in it"])
    assert tok.eos_token_id in p_ids[0]  # the chat template puts EOS inside the prompt
    torch.manual_seed(0)
    comp = generate(agent, p_ids, 2)
    assert comp.prompt_ids == p_ids
    for ids, trunc in zip(comp.ids, comp.truncated):
        if not trunc:
            assert ids[-1] == tok.eos_token_id and tok.eos_token_id not in ids[:-1]
    prompts = [p for p in p_ids for _ in range(2)]
    batched, mask = completion_logprobs(agent.model, prompts, comp.ids, tok.pad_token_id)
    for b in range(len(prompts)):
        single, _ = completion_logprobs(agent.model, [prompts[b]], [comp.ids[b]], tok.pad_token_id)
        n = len(comp.ids[b])
        assert mask[b].sum().item() == n
        assert torch.allclose(batched[b, :n], single[0, :n], atol=1e-4)
        assert torch.all(batched[b, n:] == 0)


def test_logprobs_equal_full_log_softmax():
    agent, = build_agents(["tiny"])
    prompt, comp = [[5, 6, 7]], [[8, 9, 0]]
    lp, _ = completion_logprobs(agent.model, prompt, comp, 0)
    with torch.no_grad():
        logits = agent.model(torch.tensor([[5, 6, 7, 8, 9, 0]])).logits[0]
    ref = torch.log_softmax(logits.float(), -1)[2:5].gather(-1, torch.tensor([[8], [9], [0]])).squeeze(-1)
    assert torch.allclose(lp[0], ref, atol=1e-5)
