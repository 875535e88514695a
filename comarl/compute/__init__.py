"""How models run: collectives, FSDP2 sharding, mixed precision, dropout, micro-batches and device placement.

Below the training loop: the loop, the updates, the critics and the rounds all use these.
"""
