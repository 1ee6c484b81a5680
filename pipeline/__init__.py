"""Spark jobs `hapipe` (DESIGN.md section 7): soak, verify, analyze. Not written yet:
issue "hapipe".
"""
