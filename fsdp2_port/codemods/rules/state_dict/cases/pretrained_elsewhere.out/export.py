def save_merged(model, path):
    # TODO(fsdp2-port): F2P008 model.save_pretrained saves state_dict(), this rank's DTensor shards under FSDP2: pass state_dict=get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)), taken on every rank, and save on rank 0
    model.save_pretrained(path)


def save_given(model, path, state):
    model.save_pretrained(path, state_dict=state)
