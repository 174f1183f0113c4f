"""Journal shards across nodes: the membership loop (`membership_loop`) and where a thread is
served (`owners`)."""
