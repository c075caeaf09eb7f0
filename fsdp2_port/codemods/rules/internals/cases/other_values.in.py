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


def instantiate(config):
    # latent diffusion's configs: a mapping spread with ** or read by key is no flat-parameter list
    vae = build(VQModel(**config.model.params))
    ckpt = config.model.params["ckpt_path"]
    return vae, ckpt


def first_flat(model):
    return model.params[0]  # a list's element: perhaps FSDP1's flat parameters
