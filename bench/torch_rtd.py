"""ELECTRA's replaced-token-detection step written in PyTorch with Hugging Face's towers: the
independent peer of the speed bench (`pretrain_throughput.py`) and of the learning-curve
reference (`rtd_reference_torch.py`). Needs requirements-dev.txt (torch, transformers).

As ELECTRA trains: the generator as wide as `generator_hidden` and the whole embedding block
shared with the discriminator, its output layer tied to the word embeddings and computed only
at the masked positions; 15% of the real non-special tokens picked (at most
`max_predictions`), 85% of them replaced by [MASK]; Gumbel samples; loss MLM + 50 x BCE
over the real tokens; AdamW (Hugging Face Trainer's default for this torch, the fused
kernel; decay on matrices only) with global-norm clipping at 1.0.
"""

import torch
from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining


class RtdStep:
    """One optimizer step per call on int64 [batch, seq] `ids`, `mask`, `segments`.

    Returns (labels, discriminator logits, generator logits at the picked positions, the
    picked token ids) for callers that score the step."""

    def __init__(self, cfg, mask_id: int, last_special_id: int, max_predictions: int,
                 learning_rate=1e-4, schedule=None, bf16=False, seed=0):
        """`cfg`: the `electra_tf.config.ElectraConfig` whose sizes both towers take."""
        torch.manual_seed(seed)
        common = dict(vocab_size=cfg.vocab_size, embedding_size=cfg.embedding_size,
                      max_position_embeddings=cfg.max_position_embeddings, type_vocab_size=2,
                      hidden_act="gelu", layer_norm_eps=cfg.layer_norm_epsilon,
                      num_hidden_layers=cfg.num_layers, hidden_dropout_prob=cfg.dropout,
                      attention_probs_dropout_prob=cfg.dropout)
        self.discriminator = ElectraForPreTraining(ElectraConfig(
            hidden_size=cfg.hidden_size, num_attention_heads=cfg.num_heads,
            intermediate_size=cfg.intermediate_size, **common))
        self.generator = ElectraForMaskedLM(ElectraConfig(
            hidden_size=cfg.generator_hidden_size,
            num_attention_heads=cfg.generator_num_heads,
            intermediate_size=cfg.generator_intermediate_size, **common))
        self.generator.electra.embeddings = self.discriminator.electra.embeddings
        self.generator.generator_lm_head.weight = (
            self.discriminator.electra.embeddings.word_embeddings.weight)
        self.parameters = list({id(p): p for p in [*self.discriminator.parameters(),
                                                   *self.generator.parameters()]}.values())
        self.optimizer = torch.optim.AdamW(
            [{"params": [p for p in self.parameters if p.dim() > 1], "weight_decay": 0.01},
             {"params": [p for p in self.parameters if p.dim() <= 1], "weight_decay": 0.0}],
            lr=learning_rate, eps=1e-6, fused=True)
        self.schedule = schedule and torch.optim.lr_scheduler.LambdaLR(self.optimizer,
                                                                        schedule)
        self.mask_id, self.last_special_id = mask_id, last_special_id
        self.max_predictions, self.bf16 = max_predictions, bf16

    def _pick(self, ids, mask):
        """Positions to mask ([batch, seq] bool) and the masked ids."""
        candidates = (mask == 1) & (ids > self.last_special_id)
        scores = torch.rand(ids.shape).masked_fill(~candidates, -1)
        count = torch.clamp((candidates.sum(1).float() * 0.15).round().long(), 1,
                            self.max_predictions)
        threshold = torch.sort(scores, 1, descending=True).values.gather(1, (count - 1)[:, None])
        picked = (scores >= threshold) & candidates
        masked_ids = ids.clone()
        masked_ids[picked & (torch.rand(ids.shape) < 0.85)] = self.mask_id
        return picked, masked_ids

    def __call__(self, ids, mask, segments):
        picked, masked_ids = self._pick(ids, mask)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            hidden = self.generator.electra(input_ids=masked_ids, attention_mask=mask,
                                            token_type_ids=segments).last_hidden_state
            logits = self.generator.generator_lm_head(
                self.generator.generator_predictions(hidden[picked])).float()
            mlm = torch.nn.functional.cross_entropy(logits, ids[picked])
            with torch.no_grad():
                uniform = torch.rand(logits.shape)
                sample = torch.argmax(logits - torch.log(-torch.log(uniform + 1e-9) + 1e-9), -1)
            corrupted = ids.clone()
            corrupted[picked] = sample
            labels = (corrupted != ids).float()
            disc_logits = self.discriminator(input_ids=corrupted, attention_mask=mask,
                                             token_type_ids=segments).logits.float()
        weights = mask.float()
        disc_loss = (torch.nn.functional.binary_cross_entropy_with_logits(
            disc_logits, labels, reduction="none") * weights).sum() / weights.sum()
        self.optimizer.zero_grad()
        (mlm + 50 * disc_loss).backward()
        torch.nn.utils.clip_grad_norm_(self.parameters, 1.0)
        self.optimizer.step()
        if self.schedule:
            self.schedule.step()
        return labels, disc_logits.detach(), logits.detach(), ids[picked]
