"""HTTP and websocket server (quart-trio on hypercorn's trio worker)."""
