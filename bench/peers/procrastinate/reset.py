"""Applies procrastinate's schema to the (freshly created) scratch database. Usage: reset.py"""
import asyncio

from bench_app import app


async def main():
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


asyncio.run(main())
