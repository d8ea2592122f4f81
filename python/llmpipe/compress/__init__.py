"""Model compression: post-training quantization (torchao int8 / int4, NF4, GPTQ), pruning (magnitude,
Wanda; unstructured, 2:4, MLP neurons), masks held through fine-tuning, QAT hooks for the trainer, and
the compression report. Each method is one small module; ``llmpipe quantize`` / ``llmpipe prune`` compose
them. The model code lives in the repo's ``train`` package, imported lazily.
"""
