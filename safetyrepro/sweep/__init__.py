"""The sweeper: the envelope × models through one package, resumable, cached, local or on Ray."""
