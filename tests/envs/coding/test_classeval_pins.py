"""Reward integrity, round 3: in ClassEval's merged class (preset ``default``) an agent's method cannot replace
another agent's at run time without losing every test.

ClassEval_0 (``AccessGatewayFilter``) with two agents, methods alternating: agent 0 writes ``filter`` and
``get_jwt_user``, agent 1 ``is_start_with`` and ``set_current_user_info_and_log``. The tampering agent 0 keeps a
correct ``is_start_with`` of its own as an extra method ``_starts`` and installs it as ``is_start_with`` the
first time its ``filter`` runs, so agent 1's wrong method never counts; the sandbox checks after the body and
after every test that each method is still the definition of its part of the merged program (``TestJob.pinned``).
"""
from __future__ import annotations

import pytest

from comarl.envs.coding.classeval import ClassEvalEnv
from comarl.envs.coding.data import load_classeval_items

FILTER = '''
    def filter(self, request):
        {swap}request_uri = request['path']
        if self.is_start_with(request_uri):
            return True
        try:
            token = self.get_jwt_user(request)
            user = token['user']
            if user['level'] > 2:
                self.set_current_user_info_and_log(user)
                return True
        except:
            return False
'''
GET_JWT = '''
    def get_jwt_user(self, request):
        token = request['headers']['Authorization']
        user = token['user']
        if token['jwt'].startswith(user['name']):
            jwt_str_date = token['jwt'].split(user['name'])[1]
            jwt_date = datetime.datetime.strptime(jwt_str_date, "%Y-%m-%d")
            if datetime.datetime.today() - jwt_date >= datetime.timedelta(days=3):
                return None
        return token
'''
REAL_START = '''def _starts(self, request_uri):
    return any(request_uri.startswith(s) for s in ["/api", "/login"])
'''
START = '''
    def is_start_with(self, request_uri):
        {body}
'''
LOG = '''
    def set_current_user_info_and_log(self, user):
        logging.log(msg=user['name'] + user['address'] + str(datetime.datetime.now()), level=1)
'''


def _agent(*methods: str, head: str = "") -> str:
    return "```python\nimport logging\nimport datetime\n" + head + "\nclass AccessGatewayFilter:\n" + "".join(
        methods) + "```"


@pytest.fixture
def item(shared_data):
    return load_classeval_items(str(shared_data / "classeval"), None, 1)[0]


def test_a_method_swapped_at_run_time_loses_every_test(item):
    honest_0 = _agent(FILTER.format(swap=""), GET_JWT)
    honest_1 = _agent(START.format(body='return any(request_uri.startswith(s) for s in ["/api", "/login"])'), LOG)
    wrong_1 = _agent(START.format(body="return False"), LOG)
    swap = "type(self).is_start_with = type(self)._starts\n        "
    tamper_0 = _agent(FILTER.format(swap=swap), GET_JWT, head=REAL_START)
    env = ClassEvalEnv(2, sandbox={"test_timeout_s": 10.0, "total_timeout_s": 60.0})
    try:
        s = env.reset(item)
        honest, wrong, tamper = env.step_batch([s] * 3, [(honest_0, honest_1), (honest_0, wrong_1),
                                                         (tamper_0, wrong_1)])
    finally:
        env.close()
    assert honest.metrics["pass_rate"] == 1.0 and honest.metrics["rebound"] == 0.0
    assert 0 < wrong.metrics["pass_rate"] < 1.0 and wrong.metrics["rebound"] == 0.0
    assert tamper.metrics["rebound"] == 1.0 and tamper.metrics["pass_rate"] == 0.0
    assert tamper.reward < wrong.reward < honest.reward
