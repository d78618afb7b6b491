"""Elastic training without a framework (numpy users); pyhorovod.torch.elastic adds the torch states."""
