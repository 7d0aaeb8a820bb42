"""Services own transactions; routers and workers call them."""
