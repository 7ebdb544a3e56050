"""Which socket and which address: the pool (sockets per origin, the checkout queue, the
era cache), the dial plan (resolver answers vetted, failures classified by phase) and the
address guard (the pure predicate over every address)."""
