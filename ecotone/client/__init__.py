"""Clients: blocking (`connect`), async under trio and asyncio (`aconnect`)."""
