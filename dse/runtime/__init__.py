"""Phase two: deploy a mapping as per-device ONNX sub-models and run them (MPI or in-process)."""
