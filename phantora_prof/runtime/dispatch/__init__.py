"""The op stream: the capture mode that records, costs and fakes every CUDA op, and how ops dispatch."""
