"""crashpoint.faults"""
