"""The NameNode (DESIGN.md section 5): namespace, edit log through the QJM, HA states, tailer,
checkpointer and the `hafs` client. Not written yet: issue "NameNode".
"""
