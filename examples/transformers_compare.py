"""flashcl as transformers' attention in tiny random-weight Llama, Gemma 2 and gpt-oss models
(GQA, softcap and alternating sliding windows, sinks): the logits of a left-padded batch and
a 20-token greedy generation, against transformers' eager attention. Needs torch and
transformers (CI does not install them); run with the package importable:

    PYTHONPATH=python FLASHCL_LIBRARY=build/libflashcl.so python3 examples/transformers_compare.py
"""
import copy
import sys

import torch
from transformers import (Gemma2Config, GptOssConfig, LlamaConfig, AutoModelForCausalLM)

import flashcl.integrations.transformers as fcl_hf

SMALL = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=32,
             max_position_embeddings=256)
CONFIGS = {
    "llama": LlamaConfig(**SMALL),
    "gemma2": Gemma2Config(**SMALL, sliding_window=8, attn_logit_softcapping=20.0,
                           final_logit_softcapping=30.0, query_pre_attn_scalar=32),
    "gpt-oss": GptOssConfig(**SMALL, sliding_window=8, num_local_experts=4,
                            num_experts_per_tok=2, layer_types=["sliding_attention",
                                                                "full_attention"]),
}


def model_for(config, attn):
    torch.manual_seed(0)
    config = copy.deepcopy(config)  # models read their config's attention at each call
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attn).eval()
    if hasattr(model.model.layers[0].self_attn, "sinks"):  # random sinks, not zeros
        for layer in model.model.layers:
            torch.nn.init.normal_(layer.self_attn.sinks, std=1.0)
    return model


def main():
    ok = True
    torch.manual_seed(1)
    ids = torch.randint(3, 256, (2, 24))
    pad = torch.ones_like(ids)
    pad[1, :5] = 0  # the second prompt left-padded by 5
    calls = []
    attention = fcl_hf.attention
    fcl_hf.attention = lambda *a, **k: calls.append(1) or attention(*a, **k)
    name = fcl_hf.register()  # registers the counting wrapper
    for label, config in CONFIGS.items():
        calls.clear()
        eager, ours = model_for(config, "eager"), model_for(config, name)
        with torch.no_grad():
            want = eager(input_ids=ids, attention_mask=pad).logits
            got = ours(input_ids=ids, attention_mask=pad).logits
            diff = (got - want)[pad.bool()].abs().max().item()
            gen_want = eager.generate(ids[:1], max_new_tokens=20, do_sample=False)
            gen_got = ours.generate(ids[:1], max_new_tokens=20, do_sample=False)
        same = torch.equal(gen_want, gen_got)
        ok &= diff < 1e-3 and same and len(calls) > 0
        print(f"{label}: logits max |diff| {diff:.2e}, greedy 20 tokens "
              f"{'identical' if same else 'DIFFERENT'}, {len(calls)} flashcl calls")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
