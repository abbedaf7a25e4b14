"""Host-side pieces every launch shares: the in-launch synchronisation buffers, the
error record a failed wait leaves for the host, deadlines and fault injection."""
