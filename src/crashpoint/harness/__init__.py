"""crashpoint.harness"""
