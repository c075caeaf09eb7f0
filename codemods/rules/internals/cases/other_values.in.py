from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def build(net):
    return FSDP(net)


def generate(model, prompts):
    # a config read from the value: FSDP1's flat-parameter list has no max_seq_len
    limit = model.params.max_seq_len
    params = model.params
    assert len(prompts) <= params.max_batch_size
    policy = model.mixed_precision
    return limit, policy.dtype


def flat(model):
    return model.params.count(None)  # a list's own method: perhaps FSDP1's flat parameters


class Sampler:
    def __init__(self, policy_model):
        self.model_params = policy_model.params

    def limit(self):
        return self.model_params.max_seq_len
