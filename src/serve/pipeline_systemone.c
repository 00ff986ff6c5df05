/* pipeline_systemone.c: the same pipelines on POST /v1/systemone (see
 * pipeline_internal.h for the module's three files).
 *
 * A client that speaks only System One calls a pipeline as the model
 * CONFIG_PIPELINE_MODEL_PREFIX "<name>". Its request must ask exactly one
 * question, a choice, which becomes the pipeline request (criteria ->
 * candidates, instructions -> instructions, every other top-level field but
 * model and questions carried over), and the pipeline's answer gains an
 * "answers" object under that question's name. Both directions are pure
 * functions over jansson values: the run itself is pipeline.c's, and the
 * translated request meets the same contract there as any other. */
#include <stdio.h>
#include <string.h>

#include "proto/s1q.h"
#include "serve/pipeline_internal.h"

/* Checks that questions holds one choice question; sets *name and *q. */
static tandem_err the_choice_question(const json_t *questions, const char **name, json_t **q,
                                      char *err, size_t errlen, char *param, size_t paramlen) {
    if (!json_is_object(questions) || json_object_size(questions) != 1)
        return pipeline_bad_request(err, errlen, param, paramlen, "questions",
                                    "a pipeline takes exactly one question: a choice whose "
                                    "criteria are the candidates");
    void *it = json_object_iter((json_t *)questions);
    *name = json_object_iter_key(it);
    *q = json_object_iter_value(it);
    char field[PIPELINE_QUESTION_MAX + 32];
    if (!**name || strlen(*name) >= PIPELINE_QUESTION_MAX)
        return pipeline_bad_request(err, errlen, param, paramlen, "questions",
                                    "a question name takes 1 to %d bytes",
                                    PIPELINE_QUESTION_MAX - 1);
    snprintf(field, sizeof field, "questions.%s.type", *name);
    const char *type = json_string_value(json_object_get(*q, "type"));
    if (!type || strcmp(type, "choice"))
        return pipeline_bad_request(err, errlen, param, paramlen, field,
                                    "expected \"choice\": a pipeline's question is the choice "
                                    "among its candidates");
    const char *key;
    json_t *v;
    json_object_foreach(*q, key, v) {
        snprintf(field, sizeof field, "questions.%s.%s", *name, key);
        if (!s1q_field_known(key))
            return pipeline_bad_request(err, errlen, param, paramlen, field,
                                        "unknown field (a choice question takes type, "
                                        "instructions, criteria)");
    }
    return TANDEM_OK;
}

tandem_err pipeline_request_from_systemone(const json_t *request, json_t **out,
                                           char question[PIPELINE_QUESTION_MAX], char *err,
                                           size_t errlen, char *param, size_t paramlen) {
    *out = NULL;
    const char *name = NULL;
    json_t *q = NULL;
    if (!json_is_object(request))
        return pipeline_bad_request(err, errlen, param, paramlen, "(body)",
                                    "expected a JSON object");
    tandem_err e = the_choice_question(json_object_get(request, "questions"), &name, &q, err,
                                       errlen, param, paramlen);
    if (e != TANDEM_OK)
        return e;
    json_t *req = json_object();
    if (!req)
        return TANDEM_ERR_NOMEM;
    const char *key;
    json_t *v;
    int failed = 0;
    json_object_foreach((json_t *)request, key, v) {
        if (strcmp(key, "model") && strcmp(key, "questions"))
            failed |= json_object_set(req, key, v);
    }
    json_t *ins = json_object_get(q, "instructions"), *criteria = json_object_get(q, "criteria");
    if (ins && !json_is_null(ins))
        failed |= json_object_set(req, "instructions", ins);
    if (criteria)
        failed |= json_object_set(req, "candidates", criteria);
    if (failed) {
        json_decref(req);
        return TANDEM_ERR_NOMEM;
    }
    snprintf(question, PIPELINE_QUESTION_MAX, "%s", name);
    *out = req;
    return TANDEM_OK;
}

/* The choice answer the verdict's choice came from: the escalation's when the
 * pipeline escalated, else the decide stage's. */
static json_t *deciding_answer(const json_t *body) {
    json_t *esc = json_object_get(body, "escalation");
    json_t *nested = json_object_get(esc, "result");
    if (nested)
        return deciding_answer(nested);
    json_t *from = esc ? esc : json_object_get(body, "decide");
    return json_object_get(json_object_get(from, "answers"), CONFIG_DECIDE_CHOICE_ID);
}

tandem_err pipeline_answer_to_systemone(json_t *body, const char *model, const char *question) {
    json_t *answers = json_object();
    const char *choice = json_string_value(json_object_get(body, "choice"));
    if (answers && choice) {
        json_t *probs = json_object_get(deciding_answer(body), "probabilities");
        json_t *p = json_object_get(probs, choice);
        json_t *answer = json_pack("{sssssfso}", "type", "choice", "choice", choice,
                                   "confidence", p ? json_number_value(p) : 0.0, "probabilities",
                                   probs ? json_incref(probs) : json_object());
        if (json_object_set_new(answers, question, answer)) {
            json_decref(answers);
            return TANDEM_ERR_NOMEM;
        }
    }
    if (json_object_set_new(body, "answers", answers) ||
        json_object_set_new(body, "model", json_string(model)))
        return TANDEM_ERR_NOMEM;
    return TANDEM_OK;
}
