"""crashpoint.agents"""
