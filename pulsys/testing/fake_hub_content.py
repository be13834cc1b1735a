"""Small repositories for the fake Hub that real libraries can load: a dataset that
`datasets.load_dataset` reads (a CSV file under data/ and a card) and a tokenizer that
`transformers.AutoTokenizer` builds (a WordLevel tokenizer.json, its config and a model
config), with no model weights. Bytes only; the FakeHub serves them like any other files.
Stdlib only.
"""

import json

_WORDS = ("hello", "world", "pulsys", "cache", "hub", "the", "is", "down")


def tiny_dataset_files(rows=32):
    csv = "text,label\n" + "".join("%s %s,%d\n" % (_WORDS[i % 8], _WORDS[(i * 3) % 8], i % 2)
                                  for i in range(rows))
    card = ("---\nlicense: mit\nconfigs:\n- config_name: default\n  data_files:\n"
            "  - split: train\n    path: data/train.csv\n---\n# tiny dataset\n")
    return {"README.md": card.encode(), "data/train.csv": csv.encode()}


def tiny_tokenizer_files():
    vocab = {"[UNK]": 0, "[PAD]": 1}
    for w in _WORDS:
        vocab[w] = len(vocab)
    special = [{"id": vocab[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for t in ("[UNK]", "[PAD]")]
    tokenizer = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": special,
                 "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
                 "decoder": None, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}}
    tokenizer_config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]",
                        "pad_token": "[PAD]", "model_max_length": 128}
    config = {"model_type": "bert", "vocab_size": len(vocab), "hidden_size": 8, "num_hidden_layers": 1,
              "num_attention_heads": 1, "intermediate_size": 8}
    return {name: (json.dumps(doc, indent=1) + "\n").encode() for name, doc in
            (("tokenizer.json", tokenizer), ("tokenizer_config.json", tokenizer_config),
             ("config.json", config))}
