"""A served world: one process holds a world open and answers the others on its control socket.

``_server`` holds the loop of ``world serve``; ``_ops`` what each request does; ``_protocol``
the frames, the socket and the client.
"""
