"""Adapters to what lies outside the process: every store (the SlateDB journal included), the
chat-model and embedding clients. Each implements an interface the layers above program against
(the store interfaces are in `core.stores`); embedded and server adapters sit behind one interface."""
